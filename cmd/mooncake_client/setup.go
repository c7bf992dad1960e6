package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// Backoff between setup attempts: it doubles from setupRetryFirst up to
// setupRetryMax.
const (
	setupRetryFirst = 250 * time.Millisecond
	setupRetryMax   = 5 * time.Second
)

// setupLogInterval is how often the daemon repeats the same setup failure
// in its log while it keeps retrying (a new failure is logged at once).
const setupLogInterval = 30 * time.Second

// errStopped reports a signal that arrived while setup was retrying.
type errStopped struct{ sig os.Signal }

func (e errStopped) Error() string { return fmt.Sprintf("stopped by %v while setting up", e.sig) }

// setupClient creates the store client. While the services it needs (the
// metadata server, the master) are unreachable it retries, with backoff,
// for as long as timeout allows (0: until stopped). A signal on stop ends
// the wait with errStopped; an attempt under way finishes first (it is
// bounded by its own RPC deadlines). Any other failure (a bad flag, no
// memory for the segment) ends setup at once.
func setupClient(cfg client.Config, timeout time.Duration, stop <-chan os.Signal, log *slog.Logger) (*client.Client, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	wait := setupRetryFirst
	var lastCause string // the failure last logged
	var lastLogged time.Time
	failures := 0
	for {
		c, err := client.New(cfg)
		if err == nil {
			if failures > 0 {
				log.Info("mooncake_client setup succeeded", "failed_attempts", failures)
			}
			return c, nil
		}
		if !retryable(err) {
			return nil, err
		}
		failures++
		if !deadline.IsZero() && !time.Now().Add(wait).Before(deadline) {
			return nil, fmt.Errorf("gave up after %d attempts in %v (--setup_timeout): %w", failures, timeout, err)
		}
		if cause := failureCause(err); cause != lastCause || time.Since(lastLogged) >= setupLogInterval {
			log.Warn("mooncake_client setup failed; retrying until the metadata server and master are reachable",
				"err", err.Error(), "attempts", failures, "next_in", wait.String())
			lastCause, lastLogged = cause, time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case sig := <-stop:
			t.Stop()
			return nil, errStopped{sig}
		case <-t.C:
		}
		wait = min(2*wait, setupRetryMax)
	}
}

// failureCause names what a setup failure comes down to, the same from
// one attempt to the next (the whole message is not: it carries the
// port each attempt picks): the network operation that failed, or the
// innermost error.
func failureCause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				err = next
				continue
			}
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				err = errs[len(errs)-1]
				continue
			}
		}
		return err.Error()
	}
}

// retryable reports whether a setup failure may go away by itself: a
// service that is not up yet, or the network on the way to it.
func retryable(err error) bool {
	if errors.Is(err, kvstore.RPCFail) || errors.Is(err, kvstore.RPCTimeout) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
