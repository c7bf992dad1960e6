package pollread

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Busy is how a read that finds nothing to read keeps trying before it
// sleeps in poll(2): first spinning for Spin, then for Yield more, handing
// the CPU to any other runnable thread (sched_yield) between tries.
//
// A thread that sleeps lets its CPU go idle, and on a virtual machine
// waking a thread on an idle CPU costs tens of microseconds, as much as a
// small round trip itself. Spinning avoids that but keeps the CPU from a
// peer on the same host that the reader waits for (a master sharing two
// cores with its clients); yielding lets that peer run at once while the
// CPU still does not go idle.
type Busy struct {
	Spin, Yield time.Duration
}

// read retries read(2) of fd as b says. It returns the first outcome
// other than EAGAIN, or EAGAIN once the budget is spent.
func (b Busy) read(fd uintptr, p []byte) (int, error) {
	start := time.Now()
	for i := 1; b.Spin > 0; i++ {
		if n, err := rawRead(fd, p); !errors.Is(err, unix.EAGAIN) {
			return n, err
		}
		if i&63 == 0 && time.Since(start) >= b.Spin {
			break
		}
	}
	if b.Yield <= 0 {
		return 0, unix.EAGAIN
	}
	start = time.Now()
	for i := 1; ; i++ {
		YieldCPU()
		if n, err := rawRead(fd, p); !errors.Is(err, unix.EAGAIN) {
			return n, err
		}
		if i&7 == 0 && time.Since(start) >= b.Yield {
			return 0, unix.EAGAIN
		}
	}
}

// YieldCPU hands this thread's CPU to another runnable thread, if there
// is one (of any process). A raw system call: the Go scheduler is not
// told, so a yield that lasts (another process ran) does not make it hand
// this goroutine's P to another thread, which would wake that thread for
// nothing.
func YieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
