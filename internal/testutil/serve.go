package testutil

import (
	"net"
	"testing"
)

// ServeTCP listens on a free loopback port and runs handle, in a goroutine
// of its own, on every connection it accepts, closing the connection when
// handle returns; the listener closes when the test ends. It returns the
// address to dial.
func ServeTCP(t testing.TB, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}
