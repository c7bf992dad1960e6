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
//	sync rank=R epoch=E [op=K] [failed=a,b] [clean=0|1]   (op defaults to 1)
//	                                   prints the replies it releases, by
//	                                   rank, or "waiting"
//	advance MS                         move the clock
//	tick                               prints one line per reply, by rank
//	view                               prints epoch, mask and world size
//	pending                            prints whether a window is open
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
			var failed []int
			if v := args["failed"]; v != "" {
				for _, s := range strings.Split(v, ",") {
					n, _ := strconv.Atoi(s)
					failed = append(failed, n)
				}
			}
			replies := m.sync(now, num("rank", -1), uint64(num("epoch", 0)), uint64(num("op", 1)), failed, num("clean", 1) == 1)
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
			got = append(got, strconv.FormatBool(m.pending()))
		default:
			t.Fatalf("%s:%d: unknown command %q", path, st.line, fields[0])
		}
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
	}
	return s
}
