package transfer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRDMA points rdmaSysfsDir at a temporary tree holding devs.
func fakeRDMA(t *testing.T, devs ...string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range devs {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := rdmaSysfsDir
	rdmaSysfsDir = dir
	t.Cleanup(func() { rdmaSysfsDir = old })
}

func TestResolveProtocol(t *testing.T) {
	cases := []struct {
		name, protocol, devices string
		host                    []string
		force                   bool
		wantWarning             string // substring; "" means no warning
		wantCode                Code   // 0: success (tcp)
	}{
		{name: "tcp", protocol: "tcp"},
		{name: "empty is tcp", protocol: ""},
		{name: "tcp ignores devices", protocol: "TCP", devices: "mlx5_0", wantWarning: "ignores the device names"},
		{name: "rdma without devices falls back", protocol: "rdma", wantWarning: "No RDMA devices found"},
		{name: "auto-discovery is no list", protocol: "rdma", devices: "auto-discovery", wantWarning: "No RDMA devices found"},
		{name: "efa without devices falls back", protocol: "efa", wantWarning: "No RDMA devices found"},
		{name: "rdma with devices but no transport", protocol: "rdma", host: []string{"mlx5_0"}, wantWarning: "no RDMA transport"},
		{name: "named device present", protocol: "rdma", devices: "mlx5_0", host: []string{"mlx5_0", "mlx5_1"}, wantWarning: "no RDMA transport"},
		{name: "named device missing", protocol: "rdma", devices: "mlx5_0,mlx5_9", host: []string{"mlx5_0"}, wantCode: CodeDeviceNotFound},
		{name: "named device missing, forced tcp", protocol: "rdma", devices: "mlx5_9", force: true},
		{name: "forced tcp", protocol: "rdma", host: []string{"mlx5_0"}, force: true},
		{name: "unknown protocol", protocol: "foo", wantCode: CodeInvalidArgument},
		{name: "unknown protocol even forced", protocol: "nvlink", force: true, wantCode: CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fakeRDMA(t, c.host...)
			got, warning, err := resolveProtocol(c.protocol, c.devices, c.force)
			if c.wantCode != 0 {
				if !errors.Is(err, &Error{Code: c.wantCode}) {
					t.Fatalf("err = %v, want code %d", err, c.wantCode)
				}
				return
			}
			if err != nil || got != "tcp" {
				t.Fatalf("= %q, %v; want tcp", got, err)
			}
			if (c.wantWarning == "") != (warning == "") || !strings.Contains(warning, c.wantWarning) {
				t.Fatalf("warning %q, want one containing %q", warning, c.wantWarning)
			}
		})
	}
}

func TestMissingDeviceErrorNamesIt(t *testing.T) {
	fakeRDMA(t, "mlx5_0")
	_, _, err := resolveProtocol("rdma", "mlx5_7", false)
	if err == nil || !strings.Contains(err.Error(), "mlx5_7") || !strings.Contains(err.Error(), "MC_FORCE_TCP") {
		t.Fatalf("error %v should name the missing device and the fix", err)
	}
}

func TestEngineStartsWithRDMAOnHostWithout(t *testing.T) {
	fakeRDMA(t)
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, Protocol: "rdma"})
	if err != nil {
		t.Fatalf("New(rdma) on a host without RDMA: %v", err)
	}
	defer e.Close()
	if _, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, Protocol: "foo"}); err == nil {
		t.Fatal("New(foo) succeeded")
	}
}
