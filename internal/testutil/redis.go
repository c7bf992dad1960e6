package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// redisReadyTimeout bounds how long StartRedis waits for redis-server.
const redisReadyTimeout = 10 * time.Second

// StartRedis starts a redis-server on a free loopback port with a
// temporary working directory and no persistence, waits until it answers
// PING, and returns its address ("127.0.0.1:PORT"). The process is killed
// and reaped in t.Cleanup. The test is skipped when redis-server is not on
// PATH (Debian: apt-get install redis-server). flags are added to its
// command line (such as "--requirepass", "secret").
func StartRedis(t testing.TB, flags ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found on PATH; install it (Debian: apt-get install redis-server) to run this test")
	}
	port := FreePorts(t, 1)[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
	}, flags...)
	startService(t, "redis-server at "+addr, bin, args, redisReadyTimeout, func() error { return pingRedis(addr) })
	return addr
}

// pingRedis sends PING; an answer, or NOAUTH (a server with a password
// is up too), means the server is ready.
func pingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(line, "+"), strings.HasPrefix(line, "-NOAUTH"):
		return nil
	}
	return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
}
