package shm

// HoldCopies makes the workers wait before every copy until the returned
// release is called.
func HoldCopies() (release func()) {
	gate := make(chan struct{})
	copyGate.Store(&gate)
	return func() {
		copyGate.Store(nil)
		close(gate)
	}
}
