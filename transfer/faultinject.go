package transfer

import (
	"fmt"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Test-only fault injection: with MC_TE_FAULT_INJECTION=1 in the
// environment, InjectLinkFailure makes this engine's transfers to a chosen
// peer fail (submission, direct shared-memory access and liveness probes),
// as a broken link would; the peer itself is untouched. Without the
// variable it refuses, so production code cannot trip over it.

// FaultInjectionEnv enables InjectLinkFailure.
const FaultInjectionEnv = "MC_TE_FAULT_INJECTION"

// InjectLinkFailure makes transfers from this engine to the segment named
// peer fail (fail true) or work again (fail false).
func (e *Engine) InjectLinkFailure(peer string, fail bool) error {
	if envvars.FaultInjection.Value() != "1" {
		return errorf(CodeInvalidArgument, nil, "fault injection is disabled (set %s=1)", FaultInjectionEnv)
	}
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	if e.brokenLinks == nil {
		e.brokenLinks = map[string]bool{}
	}
	if fail {
		e.brokenLinks[peer] = true
	} else {
		delete(e.brokenLinks, peer)
	}
	e.anyBroken.Store(len(e.brokenLinks) > 0)
	return nil
}

// linkBroken returns the injected failure for peer, or nil.
func (e *Engine) linkBroken(peer string) error {
	if !e.anyBroken.Load() { // every access asks: no lock while none is
		return nil
	}
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	if e.brokenLinks[peer] {
		return errorf(CodeSocket, fmt.Errorf("injected link failure"), "link to %s", peer)
	}
	return nil
}
