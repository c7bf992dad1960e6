package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/gpu/discovery"
	"github.com/mooncake-go/mooncake/transfer"
)

func TestHelpAndBadCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"--help"}, &out, &errb); rc != 0 || !strings.Contains(out.String(), "probe") {
		t.Fatalf("--help: rc=%d out=%q", rc, out.String())
	}
	if rc := run([]string{"frobnicate"}, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("bad command: rc=%d err=%q", rc, errb.String())
	}
}

func TestInfoIsJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"info"}, &out, &errb); rc != 0 {
		t.Fatalf("info: rc=%d err=%q", rc, errb.String())
	}
	var v struct {
		Topology map[string]any    `json:"topology"`
		GPUs     []any             `json:"gpus"`
		GPUNote  string            `json:"gpu_note"`
		CUDA     map[string]string `json:"cuda"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || len(v.Topology) == 0 || v.GPUs == nil || v.CUDA["device_memory"] == "" {
		t.Fatalf("info output %q: %v", out.String(), err)
	}
	// Without a driver (CI): no GPU, said plainly, and not an error.
	if _, err := discovery.Discover(); errors.Is(err, discovery.ErrNoDriver) {
		if len(v.GPUs) != 0 || !strings.HasPrefix(v.GPUNote, "no GPU") {
			t.Fatalf("info without a driver: gpus=%v note=%q", v.GPUs, v.GPUNote)
		}
	}
}

func TestProbe(t *testing.T) {
	target, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: transfer.P2PHandshake})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var out, errb bytes.Buffer
	if rc := run([]string{"probe", target.Name()}, &out, &errb); rc != 0 || !strings.Contains(out.String(), "reachable") {
		t.Fatalf("probe live: rc=%d out=%q err=%q", rc, out.String(), errb.String())
	}
	if rc := run([]string{"probe", "127.0.0.1:1"}, &out, &errb); rc != 1 {
		t.Fatalf("probe dead: rc=%d", rc)
	}
}
