// Package lifecycle owns the open → closing → closed life of objects that
// run work for callers (the Transfer Engine, the EP buffer, the store
// client). A Gate admits work while open; Close stops admitting, lets the
// owner cancel what runs, waits until every admitted call has left, and
// only then lets the owner release memory, exactly once.
package lifecycle

import "sync"

// Gate tracks the calls running on one object. The zero value is open.
type Gate struct {
	mu      sync.Mutex
	closing bool
	users   int
	idle    chan struct{} // made by Close; closed when users reaches 0
	done    chan struct{} // made by Close; closed once release has run
}

// Enter admits one call and reports whether it may run: false once Close
// has begun. Every true must be matched by one Exit, from any goroutine.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.users++
	return true
}

// Exit ends a call admitted by Enter.
func (g *Gate) Exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.users--
	switch {
	case g.users < 0:
		panic("lifecycle: Exit without Enter")
	case g.users == 0 && g.idle != nil:
		close(g.idle)
		g.idle = nil
	}
}

// Closing reports whether Close has begun (the object is closing or
// closed).
func (g *Gate) Closing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing
}

// Close runs the close sequence once: from now on Enter fails; cancel
// (may be nil) runs at once, to make running calls end early; then Close
// waits until every admitted call has exited and runs release (may be nil).
// A concurrent or later Close waits for the first one to finish and
// reports false; the first reports true.
func (g *Gate) Close(cancel, release func()) bool {
	g.mu.Lock()
	if g.closing {
		done := g.done
		g.mu.Unlock()
		<-done
		return false
	}
	g.closing = true
	g.done = make(chan struct{})
	idle := make(chan struct{})
	if g.users == 0 {
		close(idle)
	} else {
		g.idle = idle
	}
	g.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-idle
	if release != nil {
		release()
	}
	close(g.done)
	return true
}
