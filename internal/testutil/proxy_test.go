package testutil

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer answers each line with its own name and the line.
func echoServer(t *testing.T, name string) string {
	t.Helper()
	return ServeTCP(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			c.Write([]byte(name + " " + line))
		}
	})
}

func roundTrip(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestPartitionToFollowsTargetAndCuts: each new connection goes to the
// target of that moment; Cut closes the open one and says so; a
// connection made while cut is held and forwarded once healed.
func TestPartitionToFollowsTargetAndCuts(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	var target atomic.Value
	target.Store(a)
	p := StartPartitionTo(t, func() string { return target.Load().(string) })

	c1, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if got, err := roundTrip(t, c1); err != nil || got != "a ping\n" {
		t.Fatalf("first connection: %q, %v; want it forwarded to a", got, err)
	}
	target.Store(b)
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut closed %d connections, want 1", n)
	}
	if got, err := roundTrip(t, c1); err == nil {
		t.Fatalf("the cut connection still answered %q", got)
	}

	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	answered := make(chan string, 1)
	go func() {
		got, _ := roundTrip(t, c2)
		answered <- got
	}()
	select {
	case got := <-answered:
		t.Fatalf("a connection made while cut was answered: %q", got)
	case <-time.After(200 * time.Millisecond):
	}
	p.Heal()
	if got := <-answered; got != "b ping\n" {
		t.Fatalf("held connection after Heal: %q, want it forwarded to b", got)
	}

	target.Store("")
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(t, c3); err == nil {
		t.Fatalf("a connection with no target was answered: %q", got)
	}
}
