package master

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

// Fleet commands of the scenario driver (scenario_test.go):
//
//	mode seg= mode=active|standby|draining|retired
//	evacuate seg=                        (names the tasks it starts tN)
//	plan [segs=a,b]                      handoff dry run (client= is the owner)
//	segments                             id, client, mode, allocated bytes
//
// Placement arguments of put_start, upsert_start and put: local (prefer
// the writer's segments), owners=a,b (preferred storage owners), topk=N
// (a routed write).

// fleetPlacement adds the fleet placement arguments of c to rc.
func fleetPlacement(t *testing.T, c cmd, rc *ReplicateConfig) {
	rc.PreferLocal = c.flags["local"]
	if o := c.str("owners", ""); o != "" {
		rc.PreferredOwners = strings.Split(o, ",")
	}
	rc.RouteTopK = int(c.num(t, "topk", 0))
}

// fleetCommand runs c if it is a fleet command.
func (s *scenario) fleetCommand(c cmd, cl string) (string, bool) {
	switch c.name {
	case "mode":
		mode, ok := ParseSegmentMode(c.str("mode", ""))
		if !ok {
			mode = SegmentMode(-1)
		}
		return s.st.SetSegmentMode(cl, c.str("seg", "s1"), mode, s.now).String() + "\n", true
	case "evacuate":
		before := len(s.st.tasks)
		ev, code := s.st.EvacuateSegment(cl, c.str("seg", "s1"), s.now)
		if code != kvstore.OK {
			return code.String() + "\n", true
		}
		if len(s.st.tasks) != before {
			s.nameNewTasks()
		}
		return fmt.Sprintf("remaining=%d moving=%d started=%d dropped=%d unplaceable=%d quarantined=%d done=%v\n",
			ev.Remaining, ev.Moving, ev.Started, ev.Dropped, ev.Unplaceable, ev.Quarantined, ev.Done()), true
	case "plan":
		var segs []string
		if v := c.str("segs", ""); v != "" {
			segs = strings.Split(v, ",")
		}
		items, code := s.st.PlanHandoff(cl, segs)
		if code != kvstore.OK {
			return code.String() + "\n", true
		}
		var b strings.Builder
		for _, it := range items {
			to := "nowhere"
			if it.To != nil {
				to = it.To.ID
			}
			fmt.Fprintf(&b, "%s size=%d %s -> %s others=%d\n", it.Key, it.Size, it.From.ID, to, it.OtherReplicas)
		}
		if b.Len() == 0 {
			return "none\n", true
		}
		return b.String(), true
	case "segments":
		var b strings.Builder
		for _, sg := range s.st.Segments() {
			fmt.Fprintf(&b, "%s client=%s %s allocated=%d\n", sg.ID, sg.ClientID, sg.Mode, sg.Allocated)
		}
		return b.String(), true
	}
	return "", false
}

// nameNewTasks gives the tasks the scenario has not named yet the next
// names tN, in key order.
func (s *scenario) nameNewTasks() {
	var fresh []*task
	for id, t := range s.st.tasks {
		if !slices.Contains(s.tasks, id) {
			fresh = append(fresh, t)
		}
	}
	slices.SortFunc(fresh, func(a, b *task) int { return cmp.Compare(a.key, b.key) })
	for _, t := range fresh {
		s.tasks = append(s.tasks, t.id)
	}
}
