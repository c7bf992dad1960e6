package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/mooncake-go/mooncake/kvstore/kvevents"
)

// kvEventsFlags are the KV cache event publisher's flags (upstream's
// names and defaults, plus the replay endpoint upstream lacks).
type kvEventsFlags struct {
	enable   bool
	tenantID string // accepted for config compatibility; events carry each object's tenant
	cfg      kvevents.Config
}

// uint32Flag parses a flag into a uint32.
type uint32Flag struct{ p *uint32 }

func (f uint32Flag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*f.p), 10)
}

func (f uint32Flag) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return errors.New("want an unsigned 32-bit number")
	}
	*f.p = uint32(v)
	return nil
}

// declareKVEventsFlags declares the publisher's flags into fs.
func declareKVEventsFlags(fs *flag.FlagSet, o *options) {
	k := &o.kvEvents
	c := &k.cfg
	c.QueueCapacity, c.ReplayBufferSteps = 65536, 10000
	fs.BoolVar(&k.enable, "enable_kv_events", false, "publish KV cache events (objects stored in / removed from the cpu and disk tiers) on a ZMQ PUB socket, as vLLM and SGLang do (docs/kv-events.md)")
	fs.StringVar(&c.Endpoint, "kv_events_bind_endpoint", "", "ZMQ PUB endpoint the event publisher binds, e.g. tcp://0.0.0.0:5557 (required with --enable_kv_events)")
	fs.StringVar(&c.BackendID, "kv_events_backend_id", "", "backend_id written into every event: the cache owner's name (required with --enable_kv_events)")
	fs.BoolVar(&c.EmitLegacyCompat, "kv_events_emit_legacy_compat", true, "also write the legacy fields (type, block_hashes, parent_block_hash, token_ids, lora_id) vLLM's decoder needs")
	fs.BoolVar(&c.EmitObjectKey, "kv_events_emit_object_key", true, "write object_key (the store key) into object events; without it, events of keys that carry no decimal or 0x sequence hash are not published")
	fs.IntVar(&c.QueueCapacity, "kv_events_queue_capacity", c.QueueCapacity, "most events waiting for the publisher (0: unbounded); past it events are dropped, counted, and reported lost to replays")
	fs.StringVar(&c.ModelName, "kv_events_model_name", "", "model_name written into every event (empty: nil)")
	fs.StringVar(&k.tenantID, "kv_events_tenant_id", "default", "accepted for config compatibility: each event carries its object's tenant")
	fs.StringVar(&c.AdditionalSalt, "kv_events_additional_salt", "", "additional_salt written into every event (empty: nil)")
	fs.StringVar(&c.LoraName, "kv_events_lora_name", "", "lora_name written into every event (empty: nil)")
	fs.Var(uint32Flag{&c.BlockSize}, "kv_events_block_size", "block_size written into every event (0: nil, and 0 in the legacy stored field)")
	fs.Var(uint32Flag{&c.DPRank}, "kv_events_dp_rank", "dp_rank written into every event and batch")
	fs.StringVar(&c.ReplayEndpoint, "kv_events_replay_endpoint", "", "ZMQ ROUTER endpoint serving replays of recent batches to subscribers that missed some, e.g. tcp://0.0.0.0:5558 (empty: no replay)")
	fs.IntVar(&c.ReplayBufferSteps, "kv_events_replay_buffer_steps", c.ReplayBufferSteps, "recent batches kept for replay, also each subscriber's queue length")
}

// checkKVEventsFlags refuses an enabled publisher that lacks its endpoint
// or backend id (upstream would run without events) and bad values.
func checkKVEventsFlags(o *options) error {
	k := &o.kvEvents
	if !k.enable {
		return nil
	}
	if k.cfg.Endpoint == "" {
		return errors.New("--enable_kv_events needs --kv_events_bind_endpoint (e.g. tcp://0.0.0.0:5557)")
	}
	if k.cfg.BackendID == "" {
		return errors.New("--enable_kv_events needs --kv_events_backend_id (the name subscribers see as backend_id)")
	}
	if k.cfg.QueueCapacity < 0 {
		return fmt.Errorf("--kv_events_queue_capacity=%d: want 0 (unbounded) or a positive number", k.cfg.QueueCapacity)
	}
	if k.cfg.ReplayBufferSteps < 1 {
		return fmt.Errorf("--kv_events_replay_buffer_steps=%d: want a positive number", k.cfg.ReplayBufferSteps)
	}
	if k.cfg.ReplayEndpoint != "" && k.cfg.ReplayEndpoint == k.cfg.Endpoint {
		return errors.New("--kv_events_replay_endpoint must differ from --kv_events_bind_endpoint")
	}
	return nil
}

// startKVEvents binds the publisher when it is enabled (nil otherwise).
func startKVEvents(o *options, log *slog.Logger) (*kvevents.Publisher, error) {
	if !o.kvEvents.enable {
		return nil, nil
	}
	p, err := kvevents.Start(o.kvEvents.cfg, log)
	if err != nil {
		return nil, err
	}
	log.Info("kv events publisher enabled", "endpoint", p.Endpoint(), "replay_endpoint", p.ReplayEndpoint(),
		"backend_id", o.kvEvents.cfg.BackendID, "queue_capacity", o.kvEvents.cfg.QueueCapacity,
		"replay_buffer_steps", o.kvEvents.cfg.ReplayBufferSteps)
	return p, nil
}
