package master

import (
	"testing"
	"time"
)

// A stamp gives back the instant it was made from, the zero time for none
// (the Unix epoch itself included), stamps order as their instants, and
// instants past what a stamp holds saturate.
func TestStampRoundTripsAndOrders(t *testing.T) {
	instants := []time.Time{
		time.Unix(-1_000_000, 5), time.Unix(0, -1), time.Unix(0, 0), time.Unix(0, 1),
		epoch, time.Date(2200, 1, 1, 0, 0, 0, 7, time.UTC),
	}
	if s := stampOf(time.Time{}); s != 0 || !s.time().IsZero() {
		t.Fatalf("zero time: stamp %d, back %v", s, s.time())
	}
	if got := stampOf(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)); got != stampOf(stampMax) || got <= stampOf(instants[len(instants)-1]) {
		t.Fatalf("a stamp past 2262 is %d, want the largest, %d", got, stampOf(stampMax))
	}
	if got := stampOf(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)); got != stampOf(stampMin) || got == 0 || got >= stampOf(instants[0]) {
		t.Fatalf("a stamp before 1678 is %d, want the smallest nonzero, %d", got, stampOf(stampMin))
	}
	for i, a := range instants {
		s := stampOf(a)
		if s == 0 || !s.time().Equal(a) {
			t.Fatalf("%v: stamp %d, back %v", a, s, s.time())
		}
		if i > 0 && !(stampOf(instants[i-1]) < s) {
			t.Fatalf("stamp of %v not below that of %v", instants[i-1], a)
		}
	}
}
