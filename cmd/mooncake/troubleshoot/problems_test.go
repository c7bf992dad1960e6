package troubleshoot

import (
	"errors"
	"strings"
	"testing"
)

func TestMatchAndHint(t *testing.T) {
	err := errors.New("listen on 0.0.0.0:50051: listen tcp 0.0.0.0:50051: bind: Address already in use")
	if ps := Match(err.Error()); len(ps) != 1 || ps[0] != PortInUse {
		t.Fatalf("Match = %v", ps)
	}
	h := HintFor(err)
	if !strings.HasPrefix(h, PortInUse.Cause+"; fix: "+PortInUse.Fix) || !strings.Contains(h, "`mooncake doctor`") {
		t.Fatalf("HintFor = %q", h)
	}
	if HintFor(errors.New("all is well")) != "" || HintFor(nil) != "" {
		t.Fatal("hint for an unknown error")
	}
}

func TestCatalogIsComplete(t *testing.T) {
	ids := map[string]bool{}
	for _, p := range All {
		if ids[p.ID] || p.ID == "" || len(p.Patterns) == 0 || p.Cause == "" || p.Fix == "" {
			t.Errorf("problem %+v: duplicate id or missing field", p)
		}
		ids[p.ID] = true
		for _, pat := range p.Patterns {
			if !p.Matches("x " + strings.ToUpper(pat) + " y") {
				t.Errorf("%s does not match its pattern %q", p.ID, pat)
			}
		}
	}
}
