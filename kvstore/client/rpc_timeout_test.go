package client

import (
	"testing"
	"time"
)

// TestRPCTimeoutRejectsNonPositive: MC_RPC_TIMEOUT_MS=0 (or negative, or
// garbage) used to make every RPC's deadline already expired; it is
// rejected and the default 10 s used.
func TestRPCTimeoutRejectsNonPositive(t *testing.T) {
	for val, want := range map[string]time.Duration{"0": 10 * time.Second, "-5": 10 * time.Second, "soon": 10 * time.Second, "2500": 2500 * time.Millisecond} {
		t.Setenv("MC_RPC_TIMEOUT_MS", val)
		if got := rpcTimeout(); got != want {
			t.Errorf("MC_RPC_TIMEOUT_MS=%s: rpc timeout %v, want %v", val, got, want)
		}
	}
}
