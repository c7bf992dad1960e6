package standalone

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// slack is the goroutines the master and the real client of the test's
// daemon may start or end on their own while it runs.
const slack = 12

func TestADummyThatReadsNoRepliesIsClosedWhileOthersAreServed(t *testing.T) {
	lim := ipc.Limits{MaxInFlight: 8, ReplyTimeout: 2 * time.Second}
	srv, addr := daemonWith(t, ServerConfig{PerDummy: lim})
	good := dummy(t, addr, "s")
	if h := good.Health(); h != client.Healthy {
		t.Fatalf("health %d", h)
	}
	goroutines, fds := runtime.NumGoroutine(), openFDCount(t)

	// A dummy of the daemon's own uid that sends health calls as fast as
	// it can and never reads a reply.
	sock := rawDial(t, addr)
	defer unix.Close(sock)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		body := `{"op":"health"}`
		frame := make([]byte, 12, 12+len(body))
		binary.LittleEndian.PutUint32(frame, uint32(len(body)))
		frame[8] = 1
		frame = append(frame, body...)
		for i := range 1_000_000 {
			binary.LittleEndian.PutUint32(frame[4:], uint32(i+1))
			if _, err := unix.Write(sock, frame); err != nil {
				return // the daemon closed the connection
			}
		}
	}()
	bound := goroutines + lim.MaxInFlight + slack
	eventually(t, func() bool { return srv.Requests().InFlight == lim.MaxInFlight || runtime.NumGoroutine() > bound },
		"the silent dummy filling its requests in flight")
	if g := runtime.NumGoroutine(); g > bound {
		t.Fatalf("%d goroutines in the daemon with a dummy that reads no replies (%d before it; %d calls in flight allowed)",
			g, goroutines, lim.MaxInFlight)
	}
	// Meanwhile another dummy is served.
	if h := good.Health(); h != client.Healthy {
		t.Fatalf("a dummy beside the silent one: health %d", h)
	}
	if r := good.BatchExist([]string{"k"}); len(r) != 1 || r[0] != 0 {
		t.Fatalf("a dummy beside the silent one: exist %v", r)
	}
	// The silent dummy's connection is closed at the reply deadline,
	// although its process still holds its end, and what it held returns.
	<-stopped
	eventually(t, func() bool { return srv.Requests().ReplyTimeouts == 1 && srv.Sessions() == 1 }, "the silent dummy closed")
	if !strings.Contains(srv.MetricsText(), "\nmooncake_client_dummy_reply_timeouts_total 1\n") {
		t.Fatalf("metrics do not count the closed connection:\n%s", srv.MetricsText())
	}
	eventually(t, func() bool {
		return srv.Requests().InFlight == 0 && runtime.NumGoroutine() <= goroutines+slack && openFDCount(t) <= fds+1
	}, "goroutines and descriptors back") // +1: the silent dummy's own end
	if h := good.Health(); h != client.Healthy {
		t.Fatalf("after: health %d", h)
	}
}
