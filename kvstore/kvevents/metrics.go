package kvevents

import (
	"fmt"
	"io"
)

// Stats are a Publisher's counters and gauges.
type Stats struct {
	PublishedBatches, PublishedEvents uint64
	// DroppedEvents were lost before publication (the queue was full);
	// their batch's sequence number is reserved and replays report it
	// as lost.
	DroppedEvents uint64
	// SubscriberDrops counts batches a PUB subscriber missed because its
	// queue was full; replay recovers them while the ring holds them.
	SubscriberDrops uint64
	// SkippedUnparsedKeys counts object events not published: without
	// --kv_events_emit_object_key their key carried no sequence hash.
	SkippedUnparsedKeys                    uint64
	ReplayRequests, ReplayedBatches        uint64
	ReplayTooOld, ReplayLost, ReplayBadReq uint64
	Subscribers, QueueDepth                int
	// EpochStartSeq is the first sequence number of the current epoch,
	// LastSeq the last one used (0 before the first batch).
	EpochStartSeq, LastSeq uint64
}

// Stats returns a snapshot of the counters.
func (p *Publisher) Stats() Stats {
	depth, dropped := p.q.stats()
	ps := p.pub.Stats()
	return Stats{
		PublishedBatches: p.batches.Load(), PublishedEvents: p.events.Load(), DroppedEvents: dropped,
		SubscriberDrops: ps.Dropped, SkippedUnparsedKeys: p.skipped.Load(),
		ReplayRequests: p.replays.Load(), ReplayedBatches: p.replayed.Load(),
		ReplayTooOld: p.tooOld.Load(), ReplayLost: p.lostReq.Load(), ReplayBadReq: p.badRequest.Load(),
		Subscribers: ps.Subscribers, QueueDepth: depth,
		EpochStartSeq: p.epochStart.Load(), LastSeq: p.lastSeq.Load(),
	}
}

// WritePrometheus writes the publisher's metrics (master_kv_events_*) in
// the Prometheus text format, for the master's /metrics.
func (p *Publisher) WritePrometheus(w io.Writer) error {
	st := p.Stats()
	metrics := []struct {
		name, typ, help string
		v               uint64
	}{
		{"master_kv_events_published_batches_total", "counter", "KV event batches (ZMQ messages) published.", st.PublishedBatches},
		{"master_kv_events_published_events_total", "counter", "KV events published.", st.PublishedEvents},
		{"master_kv_events_dropped_events_total", "counter", "KV events dropped before publication because the queue was full (--kv_events_queue_capacity).", st.DroppedEvents},
		{"master_kv_events_subscriber_dropped_batches_total", "counter", "Batches a subscriber missed because its queue was full; replay recovers them.", st.SubscriberDrops},
		{"master_kv_events_skipped_unparsed_keys_total", "counter", "Object events not published: no sequence hash in the key and --kv_events_emit_object_key=false.", st.SkippedUnparsedKeys},
		{"master_kv_events_replay_requests_total", "counter", "Replay requests received.", st.ReplayRequests},
		{"master_kv_events_replayed_batches_total", "counter", "Batches sent again in answer to replay requests.", st.ReplayedBatches},
		{"master_kv_events_subscribers", "gauge", "Connected subscribers.", uint64(st.Subscribers)},
		{"master_kv_events_queue_depth", "gauge", "KV events waiting for the publisher goroutine.", uint64(st.QueueDepth)},
		{"master_kv_events_epoch_start_seq", "gauge", "First sequence number of the current epoch (0 before the first batch).", st.EpochStartSeq},
		{"master_kv_events_last_seq", "gauge", "Last sequence number used (0 before the first batch).", st.LastSeq},
	}
	for _, m := range metrics {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", m.name, m.help, m.name, m.typ, m.name, m.v); err != nil {
			return err
		}
	}
	const refused = "master_kv_events_replay_refused_total"
	if _, err := fmt.Fprintf(w, "# HELP %s Replay requests refused, by reason (the subscriber must resync).\n# TYPE %s counter\n", refused, refused); err != nil {
		return err
	}
	for _, r := range []struct {
		reason string
		v      uint64
	}{{refusedTooOld, st.ReplayTooOld}, {refusedLost, st.ReplayLost}, {refusedBadRequest, st.ReplayBadReq}} {
		if _, err := fmt.Fprintf(w, "%s{reason=%q} %d\n", refused, r.reason, r.v); err != nil {
			return err
		}
	}
	return nil
}
