package backend

import (
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

func joinReq(group string, rank, size int, seg string) *coordpb.JoinRequest {
	return &coordpb.JoinRequest{GroupId: group, Rank: int32(rank), Size: int32(size),
		Endpoint: &coordpb.Endpoint{Segment: seg}, Layout: "L"}
}

func ready(ch <-chan joinResult) (joinResult, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return joinResult{}, false
	}
}

// Scenario: a group completes when its last rank joins, every joiner gets
// the same endpoints, and the next join under the same name starts a new
// round (destroy + re-init).
func TestJoinTableRounds(t *testing.T) {
	var tab joinTable
	a := tab.join(joinReq("0", 1, 2, "s1"))
	if _, ok := ready(a); ok {
		t.Fatal("round completed with one of two ranks")
	}
	other := tab.join(joinReq("sub", 0, 1, "x")) // another group, size 1
	if r, ok := ready(other); !ok || r.err != nil || r.eps[0].GetSegment() != "x" {
		t.Fatalf("size-1 group: %+v %v", r, ok)
	}
	b := tab.join(joinReq("0", 0, 2, "s0"))
	for _, ch := range []<-chan joinResult{a, b} {
		r, ok := ready(ch)
		if !ok || r.err != nil || r.eps[0].GetSegment() != "s0" || r.eps[1].GetSegment() != "s1" {
			t.Fatalf("round 1: %+v %v", r, ok)
		}
	}
	c := tab.join(joinReq("0", 0, 2, "t0"))
	if _, ok := ready(c); ok {
		t.Fatal("re-init round completed early")
	}
	d := tab.join(joinReq("0", 1, 2, "t1"))
	if r, ok := ready(d); !ok || r.eps[0].GetSegment() != "t0" {
		t.Fatalf("round 2: %+v %v", r, ok)
	}
	if len(tab.rounds) != 0 {
		t.Fatalf("completed rounds left behind: %v", tab.rounds)
	}
}

// Scenario: mismatched size or layout is refused; a rank that gives up
// (cancel) leaves the round without it.
func TestJoinTableMismatchAndCancel(t *testing.T) {
	var tab joinTable
	a := tab.join(joinReq("g", 0, 3, "a"))
	bad := tab.join(joinReq("g", 1, 2, "b"))
	if r, _ := ready(bad); !errors.Is(r.err, ErrInvalid) {
		t.Fatalf("size mismatch: %v", r.err)
	}
	l := joinReq("g", 1, 3, "b")
	l.Layout = "other"
	if r, _ := ready(tab.join(l)); !errors.Is(r.err, ErrInvalid) {
		t.Fatalf("layout mismatch: %v", r.err)
	}
	if r, _ := ready(tab.join(joinReq("g", 3, 3, "z"))); !errors.Is(r.err, ErrInvalid) {
		t.Fatalf("rank out of range: %v", r.err)
	}
	tab.cancel("g", 0, a)
	if _, ok := tab.rounds["g"]; ok {
		t.Fatal("empty round kept after its only rank left")
	}
	x := tab.join(joinReq("g", 0, 2, "x"))
	y := tab.join(joinReq("g", 1, 2, "y"))
	for _, ch := range []<-chan joinResult{x, y} {
		if r, ok := ready(ch); !ok || r.err != nil {
			t.Fatalf("after cancel: %+v %v", r, ok)
		}
	}
}
