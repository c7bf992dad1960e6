package backend

import (
	"strings"
	"testing"
)

func answered(ch <-chan string) (string, bool) {
	select {
	case s := <-ch:
		return s, true
	default:
		return "", false
	}
}

// Scenario: a group is created only once every founder reported success.
func TestReadyTableAllSucceed(t *testing.T) {
	var tab readyTable
	tab.start("g", 3, nil)
	a, _ := tab.report("g", 0, "")
	b, _ := tab.report("g", 2, "")
	for _, ch := range []<-chan string{a, b} {
		if _, ok := answered(ch); ok {
			t.Fatal("answered before every founder reported")
		}
	}
	c, _ := tab.report("g", 1, "")
	for i, ch := range []<-chan string{a, b, c} {
		if s, ok := answered(ch); !ok || s != "" {
			t.Fatalf("founder %d: %q, %v; want success", i, s, ok)
		}
	}
	if len(tab.rounds) != 0 {
		t.Fatal("completed round kept")
	}
}

// Scenario: one founder fails; those waiting and those reporting after it
// all get the same error, naming the failed rank and its reason, and the
// membership formed with the round is handed back to be dropped.
func TestReadyTableOneFailureFailsEveryFounder(t *testing.T) {
	var tab readyTable
	gm := &groupMembers{}
	tab.start("g", 3, gm)
	a, _ := tab.report("g", 1, "")
	f, drop := tab.report("g", 0, "open segment of rank 1: connection refused")
	if drop != gm {
		t.Fatal("the failed round's membership was not handed back")
	}
	late, drop2 := tab.report("g", 2, "")
	if drop2 != nil {
		t.Fatal("membership handed back twice")
	}
	var want string
	for i, ch := range []<-chan string{a, f, late} {
		s, ok := answered(ch)
		if !ok || !strings.Contains(s, "rank 0") || !strings.Contains(s, "connection refused") {
			t.Fatalf("founder %d: %q, %v; want the failure", i, s, ok)
		}
		if want == "" {
			want = s
		} else if s != want {
			t.Fatalf("founder %d got %q, another %q: not the same error", i, s, want)
		}
	}
	if len(tab.rounds) != 0 {
		t.Fatal("round kept after every founder had its answer")
	}
}

// Scenario: a founder that gave up waiting may report again; a re-founding
// under the same name answers the earlier round's waiters with an error.
func TestReadyTableCancelAndRefound(t *testing.T) {
	var tab readyTable
	tab.start("g", 2, nil)
	a, _ := tab.report("g", 0, "")
	tab.cancel("g", 0, a)
	a2, _ := tab.report("g", 0, "")
	tab.start("g", 2, nil)
	if s, ok := answered(a2); !ok || s == "" {
		t.Fatalf("waiter of a replaced round: %q, %v; want an error", s, ok)
	}
	if s, ok := answered(a); ok {
		t.Fatalf("cancelled waiter answered %q", s)
	}
	x, _ := tab.report("g", 0, "")
	y, _ := tab.report("g", 1, "")
	for _, ch := range []<-chan string{x, y} {
		if s, ok := answered(ch); !ok || s != "" {
			t.Fatalf("new round: %q, %v", s, ok)
		}
	}
	if s, _ := answered(mustReport(&tab, "none", 0)); !strings.Contains(s, "no founding") {
		t.Fatalf("report without a round: %q", s)
	}
}

func mustReport(tab *readyTable, id string, rank int) <-chan string {
	ch, _ := tab.report(id, rank, "")
	return ch
}

// Scenario: two founders find a third gone at once. Founder 1 withdraws
// its success and reports the failure, which ends the round; founder 0's
// success was answered with that failure just as it gave up on the answer
// to withdraw too, so it reports again: it gets the same failure, not a
// "reported twice" of its own.
func TestReadyTableReportAfterAnAnswerLostToAWithdrawal(t *testing.T) {
	var tab readyTable
	tab.start("g", 3, nil)
	lost, _ := tab.report("g", 0, "")
	withdrawn, _ := tab.report("g", 1, "")
	tab.cancel("g", 1, withdrawn)
	failure, _ := tab.report("g", 1, "rank 2 does not answer")
	want, ok := answered(failure)
	if !ok || !strings.Contains(want, "rank 2 does not answer") {
		t.Fatalf("the failing report got %q, %v", want, ok)
	}
	if s, ok := answered(lost); !ok || s != want {
		t.Fatalf("founder 0's waiting report got %q, %v; want %q", s, ok, want)
	}
	tab.cancel("g", 0, lost) // too late: the answer was already sent
	again, _ := tab.report("g", 0, "rank 2 does not answer")
	if s, ok := answered(again); !ok || s != want {
		t.Fatalf("founder 0's second report got %q, %v; want the round's failure %q", s, ok, want)
	}
}
