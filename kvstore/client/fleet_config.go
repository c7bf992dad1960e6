package client

import (
	"fmt"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// FleetConfig holds the Store-RS setup options of a client
// (docs/store-operations.md). The zero value changes nothing.
type FleetConfig struct {
	// Namespace scopes every object operation of the client: the master
	// keeps its keys apart from those of every other namespace.
	Namespace kvstore.Namespace `json:"namespace"`
	// RoutedWrites sends every write to ReplicaCount replicas (at least)
	// chosen among the RouteTopK ACTIVE segments with the most free
	// space.
	RoutedWrites bool `json:"routed_writes"`
	ReplicaCount int  `json:"replica_count"`
	RouteTopK    int  `json:"route_topk"`
	// EvictionHighWatermarkPercent and EvictionLowWatermarkPercent (0:
	// unset) bound the fill of this client's segments: when one passes the
	// high mark the master evicts from it until it is below the low mark.
	EvictionHighWatermarkPercent int `json:"eviction_high_watermark_percent"`
	EvictionLowWatermarkPercent  int `json:"eviction_low_watermark_percent"`
}

// Validate checks the options: routed writes need 1 <= replica_count <=
// route_topk; a high watermark must be in 1..100 and a low one below it
// (a low one alone is invalid).
func (f FleetConfig) Validate() error {
	if err := f.Namespace.Validate(); err != nil {
		return err
	}
	if f.RoutedWrites && (f.ReplicaCount < 1 || f.RouteTopK < f.ReplicaCount) {
		return fmt.Errorf("%w: routed writes need 1 <= replica_count (%d) <= route_topk (%d)",
			kvstore.InvalidParams, f.ReplicaCount, f.RouteTopK)
	}
	if !f.RoutedWrites && (f.ReplicaCount != 0 || f.RouteTopK != 0) {
		return fmt.Errorf("%w: replica_count and route_topk apply to routed writes only (routed_writes=True)", kvstore.InvalidParams)
	}
	hi, lo := f.EvictionHighWatermarkPercent, f.EvictionLowWatermarkPercent
	switch {
	case hi == 0 && lo == 0:
	case hi < 1 || hi > 100:
		return fmt.Errorf("%w: eviction_high_watermark_percent=%d: want 1..100", kvstore.InvalidParams, hi)
	case lo < 0 || lo >= hi:
		return fmt.Errorf("%w: eviction_low_watermark_percent=%d: want 0 <= low < high (%d)", kvstore.InvalidParams, lo, hi)
	}
	return nil
}

// stamp adds the eviction watermarks to a segment this client mounts.
func (f FleetConfig) stamp(seg *pb.Segment) *pb.Segment {
	seg.EvictionHighWatermarkPercent = uint32(f.EvictionHighWatermarkPercent)
	seg.EvictionLowWatermarkPercent = uint32(f.EvictionLowWatermarkPercent)
	return seg
}

// placement is the master's form of a write's configuration, routed when
// the client routes writes.
func (c *Client) placement(cfg ReplicateConfig) *pb.ReplicateConfig {
	p := cfg.proto(c.hostID)
	if f := c.fleet; f.RoutedWrites {
		p.ReplicaNum = max(p.ReplicaNum, uint32(f.ReplicaCount))
		p.RouteTopk = uint32(f.RouteTopK)
	}
	return p
}
