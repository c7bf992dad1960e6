package kvevents

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/zmtp"
)

// stalledPublisher is what Start builds, with the replay ROUTER, but with
// the publisher goroutine not started yet: nothing drains the queue until
// the test calls go p.run().
func stalledPublisher(t *testing.T, capacity int) *Publisher {
	t.Helper()
	cfg := Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", ReplayBufferSteps: 8,
		QueueCapacity: capacity, Fields: Fields{BackendID: "b", EmitObjectKey: true}}
	ln, err := zmtp.Listen(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rln, err := zmtp.Listen(cfg.ReplayEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{
		cfg: cfg, log: slog.Default(), q: newQueue(cfg.QueueCapacity), ring: newRing(cfg.ReplayBufferSteps),
		pub: zmtp.NewPub(ln, cfg.ReplayBufferSteps, nil), stop: make(chan struct{}), ran: make(chan struct{}),
		router: zmtp.NewRouter(rln, replayLimits, 2*(cfg.ReplayBufferSteps+1), replaySendTimeout, nil),
	}
	p.done.Add(1)
	go p.serveReplays()
	return p
}

// prometheus returns p's /metrics text as a set of its sample lines.
func prometheus(t *testing.T, p *Publisher) map[string]bool {
	t.Helper()
	var b strings.Builder
	if err := p.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		lines[l] = true
	}
	return lines
}

func expectLines(t *testing.T, what string, got map[string]bool, want ...string) {
	t.Helper()
	for _, w := range want {
		if !got[w] {
			t.Errorf("%s: no line %q in the metrics", what, w)
		}
	}
}

// dealer connects to addr as a minimal ZMTP 3.0 DEALER (NULL mechanism).
func dealer(t *testing.T, addr net.Addr) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial(addr.Network(), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	ready := []byte{5}
	ready = append(ready, "READY"...)
	ready = append(ready, byte(len("Socket-Type")))
	ready = append(ready, "Socket-Type"...)
	ready = binary.BigEndian.AppendUint32(ready, uint32(len("DEALER")))
	ready = append(ready, "DEALER"...)
	if _, err := c.Write(append(append(g, 0x04, byte(len(ready))), ready...)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if _, err := io.ReadFull(r, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if cmd, _ := readFrames(t, r); len(cmd) != 1 || !strings.HasPrefix(string(cmd[0]), "\x05READY") {
		t.Fatalf("handshake: %q", cmd)
	}
	return c, r
}

// readFrames reads one message (or command) as its frames.
func readFrames(t *testing.T, r *bufio.Reader) ([][]byte, error) {
	t.Helper()
	var frames [][]byte
	for {
		flags, err := r.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		if flags&0x02 != 0 {
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				t.Fatal(err)
			}
			n = binary.BigEndian.Uint64(b[:])
		} else {
			b, err := r.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			n = uint64(b)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, body)
		if flags&0x01 == 0 {
			return frames, nil
		}
	}
}

// A queue that fills up drops events: the count shows in
// master_kv_events_dropped_events_total, the drop takes a sequence
// number, and a replay of that number is refused as lost.
func TestPrometheusCountsDroppedEventsAndRefusedReplays(t *testing.T) {
	p := stalledPublisher(t, 2)
	defer p.Close()
	for i := range 5 {
		p.Publish(Event{Kind: Stored, Medium: MediumCPU, Tenant: "default", Key: fmt.Sprint(i)})
	}
	expectLines(t, "stalled", prometheus(t, p),
		"# TYPE master_kv_events_dropped_events_total counter",
		"master_kv_events_dropped_events_total 3",
		"master_kv_events_queue_depth 2",
		"master_kv_events_published_events_total 0",
		"master_kv_events_last_seq 0",
		"master_kv_events_subscriber_dropped_batches_total 0",
		"# TYPE master_kv_events_replay_refused_total counter",
		`master_kv_events_replay_refused_total{reason="too_old"} 0`,
		`master_kv_events_replay_refused_total{reason="lost"} 0`,
		`master_kv_events_replay_refused_total{reason="bad_request"} 0`,
	)

	go p.run() // the publisher drains: one batch of 2 events, then the gap of the 3 lost
	deadline := time.Now().Add(10 * time.Second)
	for st := p.Stats(); st.PublishedEvents < 2 || st.LastSeq != st.EpochStartSeq+1; st = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := p.Stats()

	// Ask for the lost batch, then for a range that is not [from, to].
	c, r := dealer(t, p.router.Addr())
	for _, req := range [][][]byte{
		{{}, binary.BigEndian.AppendUint64(nil, st.LastSeq)},
		{{}, []byte("bad")},
	} {
		if _, err := c.Write(zmtp.EncodeMessage(req)); err != nil {
			t.Fatal(err)
		}
		reply, _ := readFrames(t, r)
		if len(reply) != 4 || binary.BigEndian.Uint64(reply[2]) != 1<<64-1 {
			t.Fatalf("reply to %q: %q", req, reply)
		}
	}
	expectLines(t, "drained", prometheus(t, p),
		"master_kv_events_dropped_events_total 3",
		"master_kv_events_queue_depth 0",
		"master_kv_events_published_batches_total 1",
		"master_kv_events_published_events_total 2",
		fmt.Sprintf("master_kv_events_epoch_start_seq %d", st.EpochStartSeq),
		fmt.Sprintf("master_kv_events_last_seq %d", st.EpochStartSeq+1),
		"master_kv_events_subscriber_dropped_batches_total 0",
		"master_kv_events_replay_requests_total 2",
		"master_kv_events_replayed_batches_total 0",
		`master_kv_events_replay_refused_total{reason="too_old"} 0`,
		`master_kv_events_replay_refused_total{reason="lost"} 1`,
		`master_kv_events_replay_refused_total{reason="bad_request"} 1`,
	)
}
