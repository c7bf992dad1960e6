package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/mooncake-go/mooncake/internal/cli"
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
		o.host != "" || o.masterAddress != "127.0.0.1:50051" || o.protocol != "tcp" || o.tenantID != "default" {
		t.Fatalf("defaults %+v", o)
	}
}

func TestRefusedFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--enable_offload=true"}, {"--log_dir=/tmp"}, {"--port=0"}, {"--threads=0"},
		{"--protocol=udp"}, {"--global_segment_size=lots"}, {"extra"},
		{"--max_requests_per_dummy=0"}, {"--max_requests_in_flight=0"}, {"--dummy_reply_timeout_seconds=0"},
	} {
		if _, err := parse(args, io.Discard); !errors.As(err, new(cli.UsageError)) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
	if _, err := parse([]string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestAllowedIDs(t *testing.T) {
	o, err := parse([]string{"--allowed_uids=1000, root,65534", "--allowed_gids=root,44"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.allowedUIDs, []uint32{1000, 0, 65534}) || !slices.Equal(o.allowedGIDs, []uint32{0, 44}) {
		t.Fatalf("uids %v gids %v", o.allowedUIDs, o.allowedGIDs)
	}
	if o, _ := parse(nil, io.Discard); len(o.allowedUIDs)+len(o.allowedGIDs) != 0 {
		t.Fatalf("allowed by default: %v %v", o.allowedUIDs, o.allowedGIDs)
	}
	for _, bad := range []string{"--allowed_uids=no-such-user-here", "--allowed_gids=no-such-group-here", "--allowed_uids=-1"} {
		if _, err := parse([]string{bad}, io.Discard); !errors.As(err, new(cli.UsageError)) {
			t.Errorf("%s: err %v, want a usage error", bad, err)
		}
	}
}
