package standalone

import (
	"fmt"
	"net"
	"os"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// trustedDaemon reports whether a process of uid may be this dummy's
// daemon: one of this process's effective uid, root, or the uid
// MC_STORE_DAEMON_UID names.
func trustedDaemon(uid uint32) bool {
	if uid == uint32(os.Geteuid()) || uid == 0 {
		return true
	}
	other := envvars.StoreDaemonUID.Int(-1)
	return other >= 0 && uint32(other) == uid
}

// checkDaemon refuses a connection whose listening end is not held by a
// trusted daemon (trustedDaemon). The abstract socket name can be bound
// by any local user before the daemon starts or after it died, and the
// dummy sends its daemon its memory (memfds) and its data: nothing is
// sent on uc before this check passes.
func (d *Dummy) checkDaemon(uc *net.UnixConn) error {
	p, err := ipc.PeerOf(uc)
	if err != nil {
		return fmt.Errorf("%w: mooncake_client at %s: %v", kvstore.RPCFail, d.cfg.ServerAddress, err)
	}
	if !trustedDaemon(p.UID) {
		return fmt.Errorf("%w: the socket %s of mooncake_client at %s is held by uid %d (pid %d), not by this user (uid %d), root or %s: refusing to send it anything",
			kvstore.RPCFail, d.socket[1:], d.cfg.ServerAddress, p.UID, p.PID, os.Geteuid(), envvars.StoreDaemonUID.Name)
	}
	return nil
}
