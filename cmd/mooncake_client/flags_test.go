package main

import (
	"errors"
	"flag"
	"io"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"4 GB": 4 << 30, "512MB": 512 << 20, "1GiB": 1 << 30, "4096": 4096, "1.5k": 1536, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "much", "-1GB", "4 XB", "50%"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

func TestDefaultsAreUpstreams(t *testing.T) {
	o, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.port != 50052 || o.httpPort != 9300 || o.globalSegmentSize != 4<<30 || o.localBufferSize != 0 ||
		o.host != "0.0.0.0" || o.masterAddress != "127.0.0.1:50051" || o.protocol != "tcp" || o.tenantID != "default" {
		t.Fatalf("defaults %+v", o)
	}
}

func TestRefusedFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--enable_offload=true"}, {"--log_dir=/tmp"}, {"--port=0"}, {"--threads=0"},
		{"--protocol=udp"}, {"--global_segment_size=lots"}, {"extra"},
	} {
		if _, err := parse(args, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
	if _, err := parse([]string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}
