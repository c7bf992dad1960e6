package backend

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scripted membership scenarios (testdata/membership/*.txt), in the style of
// etcd raft's datadriven tests. A line "> command args" runs a command; the
// lines after it, up to the next command, are its expected output. Blank
// lines and lines starting with # are ignored. Time starts at 0 and only
// moves with "advance".
//
//	new size=N [max=M] window=MS [auto=0|1]   create the group
//	sync rank=R epoch=E [op=K] [failed=a,b] [clean=0|1] [idle=1] [stall=1] [done=1]
//	                                   (op defaults to 1)
//	                                   prints the replies it releases, by
//	                                   rank, or "waiting"
//	advance MS                         move the clock
//	tick                               prints one line per reply, by rank
//	view                               prints epoch, mask and world size
//	pending                            prints whether a window is open
//	                                   (and its base and opening op)
//	aborts epoch=E [op=K]              whether a rank at collective K of
//	                                   base E gives it up for the window
//	joins epoch=E [op=K]               whether an idle rank whose next
//	                                   collective is K of base E takes part
//	register rank=R seg=S              a new incarnation in slot R; prints its gen
//	confirm rank=R gen=G [rejoin=1]    join_group's readiness
//	propose activate=0|1 ranks=a,b     queues a proposal; prints its id
//	ack rank=R gen=G epoch=E           rank R applied epoch E
//	leave rank=R gen=G                 rank R destroyed the group
//	offline rank=R gen=G               rank R's connection is gone; prints
//	                                   the replies of a window it closed
//	members                            prints epoch, base and every slot
//	                                   (state, ! when unhealthy, @gen)
//
// Every command also prints the proposals it answered.
func TestMembershipScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/membership/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runMembershipScript(t, f) })
	}
}

type scriptStep struct {
	line int
	cmd  string
	want []string
}

func parseScript(t *testing.T, path string) []scriptStep {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var steps []scriptStep
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, ">"):
			steps = append(steps, scriptStep{line: i + 1, cmd: strings.TrimSpace(l[1:])})
		case len(steps) == 0:
			t.Fatalf("%s:%d: output before any command", path, i+1)
		default:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		}
	}
	return steps
}

func runMembershipScript(t *testing.T, path string) {
	var m *membership
	now := time.Unix(0, 0)
	for _, st := range parseScript(t, path) {
		fields := strings.Fields(st.cmd)
		args := map[string]string{}
		for _, a := range fields[1:] {
			k, v, _ := strings.Cut(a, "=")
			args[k] = v
		}
		num := func(k string, def int) int {
			v, ok := args[k]
			if !ok {
				return def
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s:%d: %s=%q: %v", path, st.line, k, v, err)
			}
			return n
		}
		var got []string
		switch fields[0] {
		case "new":
			size := num("size", 0)
			var err error
			m, err = newMembership(size, num("max", size), time.Duration(num("window", 0))*time.Millisecond, num("auto", 1) == 1)
			if err != nil {
				got = append(got, "error: "+err.Error())
			}
		case "sync":
			failed := intList(args["failed"])
			replies := m.sync(now, syncRequest{rank: num("rank", -1), base: uint64(num("epoch", 0)), op: uint64(num("op", 1)),
				clean: num("clean", 1) == 1, idle: num("idle", 0) == 1, stall: num("stall", 0) == 1, done: num("done", 0) == 1}, failed)
			if len(replies) == 0 {
				got = append(got, "waiting")
			}
			got = append(got, formatReplies(replies)...)
		case "advance":
			ms, _ := strconv.Atoi(fields[1])
			now = now.Add(time.Duration(ms) * time.Millisecond)
		case "tick":
			got = append(got, formatReplies(m.tick(now))...)
		case "view":
			got = append(got, formatView(m.view()))
		case "pending":
			if w, ok := m.pendingWindow(); ok && w.op == nextCollective {
				got = append(got, fmt.Sprintf("true base=%d op=next", w.base))
			} else if ok {
				got = append(got, fmt.Sprintf("true base=%d op=%d", w.base, w.op))
			} else {
				got = append(got, "false")
			}
		case "aborts":
			if w, ok := m.pendingWindow(); ok {
				got = append(got, strconv.FormatBool(w.aborts(uint64(num("epoch", 0)), uint64(num("op", 1)))))
			} else {
				got = append(got, "no window")
			}
		case "joins":
			if w, ok := m.pendingWindow(); ok {
				got = append(got, strconv.FormatBool(w.joins(uint64(num("epoch", 0)), uint64(num("op", 1)))))
			} else {
				got = append(got, "no window")
			}
		case "register":
			gen, err := m.register(now, num("rank", -1), Endpoint{Segment: args["seg"], Buffer: 4096, Len: 4096})
			if err != nil {
				got = append(got, "error: "+err.Error())
			} else {
				got = append(got, fmt.Sprintf("gen=%d", gen))
			}
		case "confirm":
			if err := m.confirm(now, num("rank", -1), uint64(num("gen", 0)), num("rejoin", 0) == 1); err != nil {
				got = append(got, "error: "+err.Error())
			} else {
				got = append(got, "ok")
			}
		case "propose":
			got = append(got, fmt.Sprintf("id=%d", m.propose(now, num("activate", 1) == 1, intList(args["ranks"]))))
		case "ack":
			m.ack(now, num("rank", -1), uint64(num("gen", 0)), uint64(num("epoch", 0)))
		case "leave":
			m.leave(now, num("rank", -1), uint64(num("gen", 0)))
		case "offline":
			got = append(got, formatReplies(m.offline(now, num("rank", -1), uint64(num("gen", 0))))...)
		case "members":
			got = append(got, formatMembers(m.view()))
		default:
			t.Fatalf("%s:%d: unknown command %q", path, st.line, fields[0])
		}
		got = append(got, formatAnswers(m)...)
		if !slices.Equal(got, st.want) {
			t.Errorf("%s:%d: > %s\ngot:\n  %s\nwant:\n  %s", path, st.line, st.cmd,
				strings.Join(got, "\n  "), strings.Join(st.want, "\n  "))
		}
	}
}

func formatReplies(replies map[int]SyncReply) []string {
	ranks := make([]int, 0, len(replies))
	for r := range replies {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	var out []string
	for _, r := range ranks {
		out = append(out, fmt.Sprintf("rank %d: %s", r, formatReply(replies[r])))
	}
	return out
}

func formatView(v View) string {
	var b strings.Builder
	for _, a := range v.Active {
		if a {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return fmt.Sprintf("epoch=%d mask=%s world=%d", v.Epoch, b.String(), v.WorldSize())
}

func formatReply(r SyncReply) string {
	s := fmt.Sprintf("%s %s", r.Status, formatView(r.View))
	if r.Status == SyncReconciled {
		s += fmt.Sprintf(" excluded=%v retry=%v", r.Excluded, r.Retry)
		if r.Diverged {
			s += " diverged"
		}
		if r.Behind {
			s += " behind"
		}
		if r.Completed {
			s += " completed"
		}
	}
	return s
}

func intList(v string) []int {
	var out []int
	if v == "" {
		return nil
	}
	for _, s := range strings.Split(v, ",") {
		n, _ := strconv.Atoi(s)
		out = append(out, n)
	}
	return out
}

func formatAnswers(m *membership) []string {
	if m == nil {
		return nil
	}
	answers := m.takeAnswers()
	ids := make([]uint64, 0, len(answers))
	for id := range answers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []string
	for _, id := range ids {
		a := answers[id]
		s := fmt.Sprintf("proposal %d: %s epoch=%d", id, a.Status, a.Epoch)
		if len(a.Dropped) > 0 {
			s += fmt.Sprintf(" dropped=%v", a.Dropped)
		}
		if a.Reason != "" {
			s += " reason=" + strconv.Quote(a.Reason)
		}
		out = append(out, s)
	}
	return out
}

func formatMembers(v View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch=%d base=%d", v.Epoch, v.Base)
	for i, s := range v.State {
		fmt.Fprintf(&b, " %d:%s", i, s)
		if !v.Healthy[i] {
			b.WriteByte('!')
		}
		fmt.Fprintf(&b, "@%d", v.Endpoints[i].Gen)
	}
	return b.String()
}
