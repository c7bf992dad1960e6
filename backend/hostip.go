package backend

import (
	"fmt"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/netaddr"
)

// hostSetting names, in errors, how a user sets a rank's address.
const hostSetting = "MC_PG_HOST_IP (or call mooncake.pg.set_host_ip)"

// publishedHost returns the address a rank's engine and coordinator listen
// on and that its peers are told: set (SetHostIP) if not empty, else
// MC_PG_HOST_IP, else the local address of the route to MASTER_ADDR (what
// torchrun sets), else 127.0.0.1. A loopback or wildcard address while
// MASTER_ADDR is not loopback is refused: ranks on other hosts could not
// reach it.
func publishedHost(set string) (string, error) {
	if set == "" {
		set = envvars.PGHostIP.Value()
	}
	host, err := netaddr.Choose(set, netaddr.TorchMaster(), hostSetting)
	if err != nil {
		return "", fmt.Errorf("%w: rank address: %w", ErrInvalid, err)
	}
	return host, nil
}
