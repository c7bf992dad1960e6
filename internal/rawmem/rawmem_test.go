package rawmem

import "testing"

func TestAtAndAddrRoundTrip(t *testing.T) {
	b := []byte("registered memory")
	v := At(Addr(b), uint64(len(b)))
	if string(v) != string(b) || Addr(v) != Addr(b) {
		t.Fatalf("At(Addr(b)) = %q at %#x, want %q at %#x", v, Addr(v), b, Addr(b))
	}
	v[0] = 'R'
	if b[0] != 'R' {
		t.Fatal("the view does not alias the memory")
	}
	if At(Addr(b), 0) != nil {
		t.Fatal("a zero-length view is not nil")
	}
}
