package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/zmtp"
)

// maxBatchEvents is the most events one published message carries (as
// upstream's publisher groups them).
const maxBatchEvents = 64

// batchLinger is how long the publisher lets events gather after the
// first one wakes it: at high rates a batch then carries many events, so
// the master sends (and every subscriber wakes) up to 1000 times a second
// instead of once per put. It is the most an event waits.
const batchLinger = time.Millisecond

// replayLimits bounds a replay request: a delimiter and two 8-byte
// sequence numbers fit with room to spare.
var replayLimits = zmtp.Limits{MaxFrame: 64, MaxFrames: 4}

// replaySendTimeout is how long a replay waits for a requester's queue to
// have room before it disconnects the requester.
const replaySendTimeout = 10 * time.Second

// Config configures a Publisher.
type Config struct {
	// Endpoint is the PUB socket's bind endpoint (tcp://HOST:PORT,
	// ipc://PATH).
	Endpoint string
	// ReplayEndpoint, when set, is the ROUTER socket serving replays.
	ReplayEndpoint string
	// ReplayBufferSteps is how many recent batches are kept for replay;
	// it is also each subscriber's queue length on the PUB socket.
	ReplayBufferSteps int
	// QueueCapacity bounds the events waiting for the publisher
	// goroutine; 0 is unbounded.
	QueueCapacity int
	Fields
}

// Validate checks the configuration without binding anything.
func (c *Config) Validate() error {
	switch {
	case c.Endpoint == "":
		return errors.New("kv events: the bind endpoint is empty")
	case c.BackendID == "":
		return errors.New("kv events: the backend id is empty")
	case c.QueueCapacity < 0:
		return fmt.Errorf("kv events: queue capacity %d: want 0 (unbounded) or a positive number", c.QueueCapacity)
	case c.ReplayBufferSteps < 1:
		return fmt.Errorf("kv events: replay buffer of %d batches: want at least 1", c.ReplayBufferSteps)
	case c.ReplayEndpoint != "" && c.ReplayEndpoint == c.Endpoint:
		return errors.New("kv events: the replay endpoint is the bind endpoint")
	}
	return nil
}

// Publisher publishes the master's KV cache events on a ZMQ PUB socket
// and serves replays of recent batches on a ROUTER socket. Publish is
// called on the master's hot path and never blocks; one goroutine
// encodes and sends, another answers replays.
//
// Close publishes what is queued, then closes both sockets: subscribers
// are disconnected, replays in flight are cut off, and events published
// after Close are discarded.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	q      *queue
	ring   *ring
	pub    *zmtp.Pub
	router *zmtp.Router

	closed    atomic.Bool
	stop      chan struct{}
	ran       chan struct{} // closed when run returns
	done      sync.WaitGroup
	closeOnce sync.Once

	// written by the publisher goroutine only, read by Stats
	lastSeq         atomic.Uint64
	epochStart      atomic.Uint64
	batches, events atomic.Uint64
	skipped         atomic.Uint64

	replays, replayed           atomic.Uint64
	tooOld, lostReq, badRequest atomic.Uint64
}

// Start binds the sockets and starts the goroutines. A bind failure is
// returned with the endpoint in the message.
func Start(cfg Config, log *slog.Logger) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := zmtp.Listen(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("kv events: %w", err)
	}
	p := &Publisher{
		cfg: cfg, log: log, q: newQueue(cfg.QueueCapacity), ring: newRing(cfg.ReplayBufferSteps),
		pub: zmtp.NewPub(ln, cfg.ReplayBufferSteps, log), stop: make(chan struct{}), ran: make(chan struct{}),
	}
	if cfg.ReplayEndpoint != "" {
		rln, err := zmtp.Listen(cfg.ReplayEndpoint)
		if err != nil {
			_ = p.pub.Close()
			return nil, fmt.Errorf("kv events replay: %w", err)
		}
		p.router = zmtp.NewRouter(rln, replayLimits, 2*(cfg.ReplayBufferSteps+1), replaySendTimeout, log)
		p.done.Add(1)
		go p.serveReplays()
	}
	go p.run()
	return p, nil
}

// Endpoint is the PUB socket's bound endpoint (the port filled in).
func (p *Publisher) Endpoint() string { return zmtp.Endpoint(p.pub.Addr()) }

// ReplayEndpoint is the ROUTER socket's bound endpoint, "" without one.
func (p *Publisher) ReplayEndpoint() string {
	if p.router == nil {
		return ""
	}
	return zmtp.Endpoint(p.router.Addr())
}

// Publish queues ev; it never blocks (see queue).
func (p *Publisher) Publish(ev Event) {
	if !p.closed.Load() {
		p.q.push(ev)
	}
}

// NewEpoch makes the next batch start a new epoch: its sequence number
// (and event id) jumps to the current Unix time in microseconds, or past
// the last one if that is later, and the replay ring forgets the old
// epoch. The master calls it when it becomes the leader of a new view.
func (p *Publisher) NewEpoch() {
	if !p.closed.Load() {
		p.q.pushEpoch()
	}
}

// Close stops the publisher; see Publisher.
func (p *Publisher) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		close(p.stop)
		<-p.ran
		err = p.pub.Close()
		if p.router != nil {
			err = errors.Join(err, p.router.Close())
		}
		p.done.Wait()
	})
	return err
}

// run is the publisher goroutine.
func (p *Publisher) run() {
	defer close(p.ran)
	var (
		buf     []item
		batch   []Event
		scratch mapWriter
		seq     uint64 // next sequence number; 0: start an epoch first
		eventID uint64
		linger  = time.NewTimer(batchLinger)
	)
	defer linger.Stop()
	startEpoch := func() {
		base := uint64(time.Now().UnixMicro())
		seq, eventID = max(base, seq), max(base, eventID)
		p.epochStart.Store(seq)
	}
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if seq == 0 {
			startEpoch()
		}
		payload := p.cfg.encodeBatch(batch, eventID, time.Now().UnixMilli(), &scratch)
		p.pub.Send([][]byte{{}, binary.BigEndian.AppendUint64(nil, seq), payload})
		p.ring.add(seq, payload)
		p.lastSeq.Store(seq)
		p.batches.Add(1)
		p.events.Add(uint64(len(batch)))
		seq++
		eventID += uint64(len(batch))
		batch = batch[:0]
	}
	for {
		select {
		case <-p.q.wake:
			linger.Reset(batchLinger)
			select {
			case <-linger.C:
			case <-p.stop:
			}
		case <-p.stop:
		}
		buf = p.q.take(buf)
		for _, it := range buf {
			switch {
			case it.epoch:
				flush()
				if seq != 0 {
					startEpoch()
				}
			case it.lost > 0:
				flush()
				if seq == 0 {
					startEpoch()
				}
				p.ring.add(seq, nil) // a gap the replay reports as lost
				p.lastSeq.Store(seq)
				seq++
			case !p.cfg.encodable(it.ev):
				p.skipped.Add(1)
			default:
				batch = append(batch, it.ev)
				if len(batch) == maxBatchEvents {
					flush()
				}
			}
		}
		flush()
		select {
		case <-p.stop:
			return
		default:
		}
	}
}

// serveReplays is the replay goroutine.
func (p *Publisher) serveReplays() {
	defer p.done.Done()
	for m := range p.router.Incoming() {
		p.replays.Add(1)
		msgs, n, refusal := replayReplies(m.Frames, p.ring)
		switch refusal {
		case refusedTooOld:
			p.tooOld.Add(1)
		case refusedLost:
			p.lostReq.Add(1)
		case refusedBadRequest:
			p.badRequest.Add(1)
		}
		for _, msg := range msgs {
			if err := p.router.Send(m.Identity, msg); err != nil {
				break
			}
		}
		p.replayed.Add(uint64(n))
	}
}
