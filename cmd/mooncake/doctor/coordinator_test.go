package doctor

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCoordinatorCheck(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mooncake_pg_coordinator")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "absent")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	live := ln.Addr().String()
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln2.Addr().String()
	ln2.Close()
	defer ln.Close()
	for _, tc := range []struct {
		bin, env string
		status   Status
		says     string
	}{
		{bin, "", OK, "in a process of its own"},
		{bin, "process", OK, "in a process of its own"},
		{missing, "", Warning, "is not installed beside this command"},
		{bin, "inprocess", Warning, "MC_PG_COORDINATOR=inprocess"},
		{missing, "process", Failure, "no mooncake_pg_coordinator command was found"},
		{bin, "nonsense", Failure, "want process, inprocess or host:port"},
		{bin, live, OK, "accepts connections"},
		{bin, closed, Failure, "MC_PG_COORDINATOR=" + closed},
	} {
		cfg := Config{CoordinatorBin: tc.bin, Timeout: time.Second}
		r := checkCoordinator(cfg, parseEnviron([]string{"MC_PG_COORDINATOR=" + tc.env}))
		if r.Status != tc.status || !strings.Contains(r.Message, tc.says) {
			t.Errorf("bin %s, MC_PG_COORDINATOR=%q: %s %q; want %s containing %q", filepath.Base(tc.bin), tc.env, r.Status, r.Message, tc.status, tc.says)
		}
		if r.Status != OK && (r.Fix == "" || r.Problem == "") {
			t.Errorf("MC_PG_COORDINATOR=%q: a %s without its fix: %+v", tc.env, r.Status, r)
		}
	}
}
