// Package redis is a small Redis client: RESP2 over one TCP connection,
// AUTH (with an ACL user or not) and SELECT on connecting, and the few
// commands the HA master view and the Transfer Engine's metadata need
// (GET, SET, DEL, HMGET, EVAL), each bounded by its context's deadline.
// The project takes no Redis module as a dependency; this is the one
// client both users share. Replies are parsed by ReadReply, which is
// fuzzed and bounds every length a server announces.
package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("redis: client closed")

// Client talks to one Redis server over one connection, which it dials
// on first use and again after any I/O error (a reply half read leaves
// the stream unusable). Calls are serialized; a call waiting for its turn
// gives up when its context ends. It is safe for concurrent use.
type Client struct {
	opts Options

	turn   chan struct{} // holds one token: the connection is free
	conn   net.Conn
	br     *bufio.Reader
	wbuf   []byte
	closed bool
}

// New returns a client for opts; it connects on the first call.
func New(opts Options) *Client {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = DefaultCommandTimeout
	}
	c := &Client{opts: opts, turn: make(chan struct{}, 1)}
	c.turn <- struct{}{}
	return c
}

// acquire waits for the connection, or for ctx to end.
func (c *Client) acquire(ctx context.Context) error {
	select {
	case <-c.turn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) release() { c.turn <- struct{}{} }

// Addr is the server's address.
func (c *Client) Addr() string { return c.opts.Addr }

// Do sends one command and returns its reply. An error reply comes back
// as *Error (the connection stays usable); a failure to connect, log in,
// send or read comes back as an error naming the server, and the next
// call connects again.
func (c *Client) Do(ctx context.Context, args ...string) (Reply, error) {
	if len(args) == 0 {
		return Reply{}, errors.New("redis: empty command")
	}
	if err := c.acquire(ctx); err != nil {
		return Reply{}, fmt.Errorf("redis %s: %s: waiting for the connection: %w", c.opts.Addr, args[0], err)
	}
	defer c.release()
	if c.closed {
		return Reply{}, ErrClosed
	}
	if c.conn == nil {
		if err := c.connect(ctx); err != nil {
			return Reply{}, fmt.Errorf("redis %s: %w", c.opts.Addr, err)
		}
	}
	r, err := c.roundTrip(ctx, args)
	if err != nil {
		c.drop()
		return Reply{}, fmt.Errorf("redis %s: %s: %w", c.opts.Addr, args[0], err)
	}
	if r.Kind == ErrorReply {
		return Reply{}, &Error{Msg: string(r.Str)}
	}
	return r, nil
}

// connect dials and logs in, holding the turn.
func (c *Client) connect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", c.opts.Addr)
	if err != nil {
		return err
	}
	c.conn, c.br = conn, bufio.NewReader(conn)
	login := func(args ...string) error {
		r, err := c.roundTrip(dctx, args)
		if err == nil && r.Kind == ErrorReply {
			err = &Error{Msg: string(r.Str)}
		}
		return err
	}
	if c.opts.Password != "" {
		args := []string{"AUTH", c.opts.Password}
		if c.opts.Username != "" {
			args = []string{"AUTH", c.opts.Username, c.opts.Password}
		}
		if err := login(args...); err != nil {
			c.drop()
			return fmt.Errorf("AUTH: %w", err)
		}
	}
	if c.opts.DB != 0 {
		if err := login("SELECT", strconv.Itoa(c.opts.DB)); err != nil {
			c.drop()
			return fmt.Errorf("SELECT %d: %w", c.opts.DB, err)
		}
	}
	return nil
}

// roundTrip writes args and reads the reply under ctx's deadline (or the
// command timeout); cancelling ctx interrupts it.
func (c *Client) roundTrip(ctx context.Context, args []string) (Reply, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.opts.CommandTimeout)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return Reply{}, err
	}
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.wbuf = appendCommand(c.wbuf[:0], args)
	if _, err := c.conn.Write(c.wbuf); err != nil {
		return Reply{}, ctxErr(ctx, err)
	}
	r, err := ReadReply(c.br)
	if err != nil {
		return Reply{}, ctxErr(ctx, err)
	}
	return r, nil
}

// ctxErr prefers the context's error to the I/O error it caused: a
// cancelled context, or a deadline that has passed (the connection's
// deadline may fire a moment before the context's own timer).
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// drop closes the connection, holding the turn.
func (c *Client) drop() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// Close closes the connection once the call in progress, if any, ends;
// later calls return ErrClosed.
func (c *Client) Close() error {
	_ = c.acquire(context.Background())
	defer c.release()
	c.closed = true
	c.drop()
	return nil
}

// Get returns the value of key, and false when there is none.
func (c *Client) Get(ctx context.Context, key string) ([]byte, bool, error) {
	r, err := c.Do(ctx, "GET", key)
	if err != nil {
		return nil, false, err
	}
	switch r.Kind {
	case Nil:
		return nil, false, nil
	case Bulk:
		return r.Str, true, nil
	}
	return nil, false, unexpected("GET", r)
}

// Set stores value under key, with no expiry.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	r, err := c.Do(ctx, "SET", key, string(value))
	if err != nil {
		return err
	}
	if r.Kind != Status {
		return unexpected("SET", r)
	}
	return nil
}

// Del deletes keys and returns how many existed.
func (c *Client) Del(ctx context.Context, keys ...string) (int64, error) {
	r, err := c.Do(ctx, append([]string{"DEL"}, keys...)...)
	if err != nil {
		return 0, err
	}
	if r.Kind != Integer {
		return 0, unexpected("DEL", r)
	}
	return r.Int, nil
}

// Eval runs a Lua script atomically on the server with keys as KEYS and
// args as ARGV.
func (c *Client) Eval(ctx context.Context, script string, keys []string, args ...string) (Reply, error) {
	cmd := make([]string, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "EVAL", script, strconv.Itoa(len(keys)))
	cmd = append(append(cmd, keys...), args...)
	return c.Do(ctx, cmd...)
}

// unexpected reports a reply of the wrong kind for cmd.
func unexpected(cmd string, r Reply) error {
	return fmt.Errorf("%w: unexpected %s reply to %s", ErrProtocol, r.Kind, cmd)
}

// String names a kind in errors.
func (k Kind) String() string {
	switch k {
	case Status:
		return "status"
	case ErrorReply:
		return "error"
	case Integer:
		return "integer"
	case Bulk:
		return "bulk string"
	case Array:
		return "array"
	case Nil:
		return "nil"
	}
	return fmt.Sprintf("kind %q", byte(k))
}
