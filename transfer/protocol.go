package transfer

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// rdmaSysfsDir lists the host's RDMA devices (one directory per HCA, as
// the kernel's ib_core exposes them). A variable so that tests can point
// it at a fake tree.
var rdmaSysfsDir = "/sys/class/infiniband"

// rdmaProtocols are the protocol names of RDMA-class transports that
// upstream installs when the host has HCAs. This build has none of them,
// so each resolves to TCP (see resolveProtocol).
var rdmaProtocols = []string{"rdma", "efa"}

// RDMADevices returns the names of the host's RDMA devices, sorted; none
// when the kernel exposes none (or no RDMA stack is loaded).
func RDMADevices() []string {
	entries, err := os.ReadDir(rdmaSysfsDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// splitDevices parses a device list ("mlx5_0,mlx5_1"); "" and upstream's
// "auto-discovery" mean no explicit list.
func splitDevices(list string) []string {
	list = strings.TrimSpace(list)
	if list == "" || list == "auto-discovery" {
		return nil
	}
	return strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

// ResolveProtocol is resolveProtocol with MC_FORCE_TCP read from the
// environment: the transport an engine started with these settings would
// run ("tcp") and what it would warn about, or why it would refuse them. It
// logs nothing; a caller that shares an engine validates its own protocol
// setting with it.
func ResolveProtocol(protocol, devices string) (transport, warning string, err error) {
	return resolveProtocol(protocol, devices, envvars.ForceTCP.Enabled())
}

// resolveProtocol turns the protocol a caller asked for into the transport
// the engine runs, and a warning for the log when the choice is not what
// was asked for, following upstream's rules where they apply:
//
//   - "tcp" (or ""): TCP. Device names are ignored, with a warning.
//   - "rdma" or "efa" with MC_FORCE_TCP (forceTCP): TCP.
//   - "rdma" or "efa" on a host without RDMA devices: TCP, with a warning
//     naming what was looked for (upstream's "No RDMA devices found").
//   - "rdma" or "efa" naming devices the host does not have: an error
//     (CodeDeviceNotFound) that names them; upstream fails there too.
//   - "rdma" or "efa" on a host with RDMA devices: TCP, with a warning that
//     this build has no RDMA transport.
//   - any other name: an error (CodeInvalidArgument).
//
// Same-host peers use shared memory under TCP in every case unless
// MC_FORCE_TCP is set.
func resolveProtocol(protocol, devices string, forceTCP bool) (transport, warning string, err error) {
	asked := strings.ToLower(strings.TrimSpace(protocol))
	named := splitDevices(devices)
	switch {
	case asked == "" || asked == "tcp":
		if len(named) > 0 {
			return "tcp", fmt.Sprintf("protocol tcp ignores the device names %q", devices), nil
		}
		return "tcp", "", nil
	case !slices.Contains(rdmaProtocols, asked):
		return "", "", errorf(CodeInvalidArgument, nil,
			"unknown protocol %q (this build runs tcp; rdma and efa fall back to tcp)", protocol)
	case forceTCP:
		return "tcp", "", nil
	}
	present := RDMADevices()
	var missing []string
	for _, d := range named {
		if !slices.Contains(present, d) {
			missing = append(missing, d)
		}
	}
	switch {
	case len(missing) > 0:
		return "", "", errorf(CodeDeviceNotFound, nil,
			"protocol %s: RDMA device(s) %s not found in %s (present: %v); use protocol \"tcp\", "+
				"an empty device list to fall back to tcp automatically, or MC_FORCE_TCP=1",
			asked, strings.Join(missing, ","), rdmaSysfsDir, present)
	case len(present) == 0:
		return "tcp", fmt.Sprintf("No RDMA devices found in %s; protocol %s falls back to tcp", rdmaSysfsDir, asked), nil
	}
	return "tcp", fmt.Sprintf("this build has no RDMA transport; protocol %s on devices %v runs as tcp", asked, present), nil
}

// transportIndex resolves a request's transport hint (Request.Transport)
// to an index into the engine's transports, -1 for the engine's choice.
// The RDMA-class names resolve as the protocol does: to TCP.
func (e *Engine) transportIndex(hint string) (int, error) {
	name := strings.ToLower(strings.TrimSpace(hint))
	if name == "" {
		return -1, nil
	}
	if slices.Contains(rdmaProtocols, name) {
		name = "tcp"
	}
	for i, t := range e.transports {
		if t.Name() == name {
			return i, nil
		}
	}
	names := make([]string, len(e.transports))
	for i, t := range e.transports {
		names[i] = t.Name()
	}
	return 0, fmt.Errorf("transport_hint %q: this engine runs %s (and rdma, efa as tcp)", hint, strings.Join(names, ", "))
}
