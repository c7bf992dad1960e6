package backend

import "testing"

// TestViewChangedWakesOnTheNextView: a channel taken from viewChanged is
// closed by the next signalView (as applyView and startMembership call it)
// and not before, and the channel taken after that waits for the one after.
func TestViewChangedWakesOnTheNextView(t *testing.T) {
	var g Group
	first := g.viewChanged()
	if again := g.viewChanged(); again != first {
		t.Fatal("two waiters before a view got different channels")
	}
	select {
	case <-first:
		t.Fatal("closed before any view was stored")
	default:
	}
	g.signalView()
	select {
	case <-first:
	default:
		t.Fatal("not closed by the view stored after it was taken")
	}
	second := g.viewChanged()
	select {
	case <-second:
		t.Fatal("a channel taken after a view was stored is already closed")
	default:
	}
	g.signalView()
	<-second
}
