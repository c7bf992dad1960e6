package client

import (
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

func TestFleetConfigValidate(t *testing.T) {
	for _, c := range []struct {
		f  FleetConfig
		ok bool
	}{
		{FleetConfig{}, true},
		{FleetConfig{RoutedWrites: true, ReplicaCount: 2, RouteTopK: 3}, true},
		{FleetConfig{RoutedWrites: true, ReplicaCount: 3, RouteTopK: 2}, false},
		{FleetConfig{RoutedWrites: true}, false},
		{FleetConfig{RouteTopK: 2}, false},
		{FleetConfig{EvictionHighWatermarkPercent: 90, EvictionLowWatermarkPercent: 80}, true},
		{FleetConfig{EvictionHighWatermarkPercent: 100}, true},
		{FleetConfig{EvictionHighWatermarkPercent: 101, EvictionLowWatermarkPercent: 80}, false},
		{FleetConfig{EvictionHighWatermarkPercent: 80, EvictionLowWatermarkPercent: 80}, false},
		{FleetConfig{EvictionLowWatermarkPercent: 10}, false},
		{FleetConfig{Namespace: kvstore.Namespace{Domain: "a\nb"}}, false},
	} {
		err := c.f.Validate()
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, kvstore.InvalidParams)) {
			t.Errorf("%+v: Validate() = %v, want ok=%v", c.f, err, c.ok)
		}
	}
}
