package redis_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/testutil"
)

// TestClientCommands runs the commands the HA master view and the TE
// metadata use against a real redis-server.
func TestClientCommands(t *testing.T) {
	c := redis.New(redis.Options{Addr: testutil.StartRedis(t)})
	defer c.Close()
	ctx := context.Background()
	if _, ok, err := c.Get(ctx, "k"); err != nil || ok {
		t.Fatalf("Get of a missing key: ok=%v err=%v", ok, err)
	}
	val := []byte("a\r\nbinary\x00value")
	if err := c.Set(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	got, ok, err := c.Get(ctx, "k")
	if err != nil || !ok || !bytes.Equal(got, val) {
		t.Fatalf("Get = %q %v %v, want %q", got, ok, err, val)
	}
	r, err := c.Eval(ctx, "return {redis.call('GET', KEYS[1]), tonumber(ARGV[1]) + 1, false}", []string{"k"}, "41")
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != redis.Array || len(r.Elems) != 3 || !bytes.Equal(r.Elems[0].Str, val) || r.Elems[1].Int != 42 || r.Elems[2].Kind != redis.Nil {
		t.Fatalf("EVAL reply %+v", r)
	}
	if n, err := c.Del(ctx, "k", "missing"); err != nil || n != 1 {
		t.Fatalf("Del = %d %v", n, err)
	}
	// An error reply is an *Error and leaves the connection usable.
	_, err = c.Do(ctx, "NOSUCHCOMMAND")
	var rerr *redis.Error
	if !errors.As(err, &rerr) || !strings.Contains(rerr.Msg, "unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	if r, err := c.Do(ctx, "PING"); err != nil || string(r.Str) != "PONG" {
		t.Fatalf("PING after an error reply: %+v %v", r, err)
	}
}

// TestClientAuthAndSelect logs in with an ACL user and selects a
// database; a wrong password fails with the server's error.
func TestClientAuthAndSelect(t *testing.T) {
	addr := testutil.StartRedis(t, "--requirepass", "defaultpw")
	ctx := context.Background()
	admin := redis.New(redis.Options{Addr: addr, Password: "defaultpw"})
	defer admin.Close()
	if _, err := admin.Do(ctx, "ACL", "SETUSER", "mc", "on", ">mcpw", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	user := redis.New(redis.Options{Addr: addr, Username: "mc", Password: "mcpw", DB: 3})
	defer user.Close()
	if err := user.Set(ctx, "k", []byte("in db 3")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := admin.Get(ctx, "k"); ok {
		t.Fatal("the key written in db 3 is in db 0")
	}
	if _, err := admin.Do(ctx, "SELECT", "3"); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := admin.Get(ctx, "k"); err != nil || !ok || string(v) != "in db 3" {
		t.Fatalf("db 3: %q %v %v", v, ok, err)
	}
	wrong := redis.New(redis.Options{Addr: addr, Username: "mc", Password: "nope"})
	defer wrong.Close()
	_, err := wrong.Do(ctx, "PING")
	var rerr *redis.Error
	if !errors.As(err, &rerr) || !strings.Contains(err.Error(), "AUTH") {
		t.Fatalf("wrong password: %v", err)
	}
	none := redis.New(redis.Options{Addr: addr})
	defer none.Close()
	if _, err := none.Do(ctx, "GET", "k"); !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Msg, "NOAUTH") {
		t.Fatalf("without AUTH: %v", err)
	}
}

// TestClientDeadlineAndReconnect: a server that never answers makes a
// call fail at its context's deadline; a server that comes back later is
// reached again by the next call.
func TestClientDeadlineAndReconnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // silent: reads and never answers
		}
	}()
	c := redis.New(redis.Options{Addr: ln.Addr().String()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Do(ctx, "PING"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent server: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the call outlived its deadline: %v", d)
	}
	// A call waiting behind one that hangs gives up at its own deadline.
	slow := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Do(ctx, "PING")
		slow <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	start = time.Now()
	if _, err := c.Do(ctx2, "PING"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("a call queued behind a hung one: %v after %v", err, time.Since(start))
	}
	if err := <-slow; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the hung call: %v", err)
	}

	c2 := redis.New(redis.Options{Addr: testutil.StartRedis(t)})
	defer c2.Close()
	if _, err := c2.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal"); err != nil {
		t.Fatal(err) // kills the client's own connection too
	}
	if r, err := c2.Do(context.Background(), "PING"); err != nil {
		// The first call may see the killed connection; the next redials.
		if r, err = c2.Do(context.Background(), "PING"); err != nil || string(r.Str) != "PONG" {
			t.Fatalf("after the connection was killed: %+v %v", r, err)
		}
	}
}

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:6380":   "h:6380",
		"redis://h":        "h:6379",
		"h:1/":             "h:1",
		"redis://[::1]:7":  "[::1]:7",
		"[fe80::1]":        "[fe80::1]:6379",
		" redis://h:6379 ": "h:6379",
	} {
		if got, err := redis.ParseAddr(in); err != nil || got != want {
			t.Errorf("ParseAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "redis://", "redis://h:0", "redis://h:x", "redis://h:1/2", "h1:1,h2:2", "::1", "redis://u:p@h:1", "[::1", "rediss://h:1"} {
		if got, err := redis.ParseAddr(in); err == nil {
			t.Errorf("ParseAddr(%q) = %q, want an error", in, got)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv("MC_REDIS_USERNAME", "u")
	t.Setenv("MC_REDIS_PASSWORD", "p")
	t.Setenv("MC_REDIS_DB_INDEX", "7")
	o, err := redis.OptionsFromEnv("redis://h:1")
	if err != nil || o.Addr != "h:1" || o.Username != "u" || o.Password != "p" || o.DB != 7 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range []string{"256", "-1", "x"} {
		t.Setenv("MC_REDIS_DB_INDEX", bad)
		if _, err := redis.OptionsFromEnv("redis://h:1"); err == nil || !strings.Contains(err.Error(), "MC_REDIS_DB_INDEX") {
			t.Errorf("MC_REDIS_DB_INDEX=%s: %v", bad, err)
		}
	}
}

// TestClientClosedWhileInUse closes a client while goroutines keep
// calling it: the calls in progress finish (with their reply or
// ErrClosed), none hangs, and every call after Close returns ErrClosed.
func TestClientClosedWhileInUse(t *testing.T) {
	c := redis.New(redis.Options{Addr: testutil.StartRedis(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var ok atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := c.Set(ctx, "k", []byte("v")); err != nil {
					errs <- err
					return
				}
				ok.Add(1)
			}
		}()
	}
	testutil.WaitUntil(t, 10*time.Second, "calls to succeed", func() bool { return ok.Load() > 100 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("a call ended by Close: %v, want ErrClosed", err)
		}
	}
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}
