package master

import (
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// This file is dynamic replication (upstream's hot replica fan-out, its
// PR #3389): a key read often enough gets one more memory replica, copied
// by a task like CreateCopyTask's. Reads (GetReplicaList and its batch
// form) of a key with at least one and fewer than MaxMemoryReplicas
// readable memory replicas count towards its heat in a window of
// HeatWindow; when the reads in the current window reach AdmissionQPS ×
// HeatWindow the key is admitted: observe only counts the proposal,
// enforce also queues the copy. The window then starts again.

// DynamicReplicationMode is what an admitted hot key leads to.
type DynamicReplicationMode int

// Modes of dynamic replication (--dynamic_replication_mode).
const (
	DynamicReplicationOff     DynamicReplicationMode = iota // no heat is counted
	DynamicReplicationObserve                               // proposals are counted only
	DynamicReplicationEnforce                               // proposals become copy tasks
)

// ParseDynamicReplicationMode reads upstream's off|observe|enforce.
func ParseDynamicReplicationMode(s string) (DynamicReplicationMode, error) {
	switch s {
	case "off":
		return DynamicReplicationOff, nil
	case "observe":
		return DynamicReplicationObserve, nil
	case "enforce":
		return DynamicReplicationEnforce, nil
	}
	return 0, fmt.Errorf("dynamic replication mode %q: want off, observe or enforce", s)
}

// DynamicReplicationConfig configures dynamic replication, with
// upstream's flags and defaults.
type DynamicReplicationConfig struct {
	// Mode (--dynamic_replication_mode, off).
	Mode DynamicReplicationMode
	// HeatWindow is the window reads are counted in
	// (--dynamic_replication_heat_window_seconds, 10 s).
	HeatWindow time.Duration
	// AdmissionQPS is the read rate over the window that admits a key
	// (--dynamic_replication_admission_qps_threshold, 0.8).
	AdmissionQPS float64
	// MaxMemoryReplicas is the readable memory replicas a key may reach
	// this way (--dynamic_replication_max_memory_replicas, 2).
	MaxMemoryReplicas int
}

// DefaultDynamicReplicationConfig returns upstream's defaults.
func DefaultDynamicReplicationConfig() DynamicReplicationConfig {
	return DynamicReplicationConfig{HeatWindow: 10 * time.Second, AdmissionQPS: 0.8, MaxMemoryReplicas: 2}
}

// validate checks the settings; with the mode off none is used.
func (c DynamicReplicationConfig) validate() error {
	switch {
	case c.Mode < DynamicReplicationOff || c.Mode > DynamicReplicationEnforce:
		return fmt.Errorf("dynamic replication mode %d unknown", c.Mode)
	case c.Mode == DynamicReplicationOff:
		return nil
	case c.HeatWindow < time.Second:
		return fmt.Errorf("dynamic_replication_heat_window_seconds must be at least 1")
	case !(c.AdmissionQPS > 0):
		return fmt.Errorf("dynamic_replication_admission_qps_threshold must be positive")
	case c.MaxMemoryReplicas < 1:
		return fmt.Errorf("dynamic_replication_max_memory_replicas must be at least 1")
	}
	return nil
}

// dynamicTargetMaxUse is the share of a segment a fan-out copy may fill
// it up to (upstream's 85 %).
const dynamicTargetMaxUse = 0.85

// heatWindow is a key's reads in the current window.
type heatWindow struct {
	start time.Time
	hits  uint64
}

// noteRead counts a read of o (its readable memory replicas given) and
// admits o when it is hot enough.
func (s *State) noteRead(o *object, readable []*replica, now time.Time) {
	c := s.cfg.DynamicReplication
	if c.Mode == DynamicReplicationOff || len(readable) == 0 || len(readable) >= c.MaxMemoryReplicas {
		return
	}
	if s.heat == nil {
		s.heat = make(map[string]*heatWindow)
	}
	w := s.heat[o.key]
	if w == nil || now.Sub(w.start) >= c.HeatWindow {
		w = &heatWindow{start: now}
		s.heat[o.key] = w
	}
	w.hits++
	if float64(w.hits) < c.AdmissionQPS*c.HeatWindow.Seconds() {
		return
	}
	delete(s.heat, o.key)
	s.m.dynReplProposals++
	if c.Mode != DynamicReplicationEnforce || s.hasOpenTask(o.key) {
		return
	}
	source := suspectLast(readable)[0]
	if target := s.fanOutTarget(o, source); target != nil {
		if _, code := s.newTask(TaskReplicaCopy, o, source, [][]*segment{{target}}, now); code == kvstore.OK {
			s.m.dynReplTasks++
		}
	}
}

// hasOpenTask reports whether an unfinished task copies or moves key.
func (s *State) hasOpenTask(key string) bool {
	for _, t := range s.tasks {
		if t.key == key && !t.final() {
			return true
		}
	}
	return false
}

// fanOutTarget picks the segment an extra replica of o goes to: one open
// to new replicas, holding none of o's, that the copy leaves at most
// dynamicTargetMaxUse full; on another host than source's if any is,
// then the least used, then the first mounted.
func (s *State) fanOutTarget(o *object, source *replica) *segment {
	var best *segment
	var bestOther bool
	var bestUse float64
	for _, sg := range s.segOrder {
		a := sg.alloc
		if !sg.open() || a.Size() == 0 || replicaOn(o, []*segment{sg}) != nil {
			continue
		}
		use := float64(a.Allocated()+o.size) / float64(a.Size())
		if use > dynamicTargetMaxUse {
			continue
		}
		other := sg.info.HostID != source.seg.info.HostID
		if best == nil || (other && !bestOther) || (other == bestOther && use < bestUse) {
			best, bestOther, bestUse = sg, other, use
		}
	}
	return best
}

// pruneHeat forgets the windows that ended.
func (s *State) pruneHeat(now time.Time) {
	for key, w := range s.heat {
		if now.Sub(w.start) >= s.cfg.DynamicReplication.HeatWindow {
			delete(s.heat, key)
		}
	}
}
