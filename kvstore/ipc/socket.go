package ipc

import (
	"fmt"
	"net"
	"time"
)

// SocketName is the abstract Unix socket a mooncake_client started with
// --port=port listens on: upstream's "@mooncake_client_<port>.sock" in the
// abstract namespace. Go spells the abstract namespace with a leading '@'
// that becomes the NUL byte, so the name is written with two.
func SocketName(port int) string {
	return fmt.Sprintf("@@mooncake_client_%d.sock", port)
}

// Listen listens on the abstract socket name.
func Listen(name string) (*net.UnixListener, error) {
	return net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
}

// Dial connects to the abstract socket name, giving up after timeout.
func Dial(name string, timeout time.Duration) (*net.UnixConn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unix", name)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
