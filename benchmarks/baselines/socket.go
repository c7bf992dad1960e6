package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// senderSub is the subcommand the socket baseline runs in a child process,
// so that sender and receiver are two processes (as a Transfer Engine
// initiator and target are) and do not share one Go scheduler; with
// --listen, it is run on another host.
const senderSub = "socket-send"

// measureSocket streams block-sized writes over streams loopback TCP
// connections for d and returns what this process received. The sender
// is a child process unless inProcess, or, with a listen address, a
// socket-send that another host runs against the address this prints on
// stderr. Each stream sends from and receives into its own share of
// footprint-sized buffers, as a transport moving distinct blocks would.
func measureSocket(block, streams, footprint int, d time.Duration, inProcess bool,
	listen string, stderr io.Writer) (result, error) {
	remote := listen != ""
	if !remote {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return result{}, err
	}
	defer ln.Close()
	dst := newTouched(footprint, 2)
	share := footprint / streams / block * block

	var child *exec.Cmd
	sendErr := make(chan error, 1)
	args := []string{"--addr", ln.Addr().String(), "--block_size", strconv.Itoa(block),
		"--streams", strconv.Itoa(streams), "--footprint", strconv.Itoa(footprint),
		"--duration", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)}
	switch {
	case remote:
		fmt.Fprintf(stderr, "listening %s\n", ln.Addr())
	case inProcess:
		go func() { sendErr <- runSender(ln.Addr().String(), block, streams, footprint, d) }()
	default:
		self, err := os.Executable()
		if err != nil {
			return result{}, err
		}
		child = exec.Command(self, append([]string{senderSub}, args...)...)
		child.Stderr = os.Stderr
		child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := child.Start(); err != nil {
			return result{}, err
		}
		defer func() {
			child.Process.Kill()
			child.Wait()
		}()
	}

	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			return result{}, fmt.Errorf("accept sender: %w", err)
		}
		conns = append(conns, c)
	}

	var received atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	start := time.Now()
	for i, c := range conns {
		in := dst[i*share : (i+1)*share]
		wg.Go(func() {
			c.SetReadDeadline(start.Add(d + 30*time.Second))
			for off := 0; ; off += block {
				if off+block > len(in) {
					off = 0
				}
				n, err := io.ReadFull(c, in[off:off+block])
				received.Add(uint64(n))
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("receive: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	switch {
	case remote: // the sender reports its own errors
	case inProcess:
		err = <-sendErr
	default:
		err = child.Wait()
	}
	if err != nil {
		return result{}, fmt.Errorf("sender: %w", err)
	}
	r := result{Kind: "socket", BlockSize: block, Streams: streams, Footprint: footprint}
	r.finish(received.Load(), elapsed)
	return r, nil
}

// runSender dials streams connections to addr and writes block-sized
// pieces of a footprint-sized buffer on each for d, then closes them.
func runSender(addr string, block, streams, footprint int, d time.Duration) error {
	src := newTouched(footprint, 1)
	share := footprint / streams / block * block
	conns := make([]*net.TCPConn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return err
		}
		conns = append(conns, c.(*net.TCPConn))
	}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i, c := range conns {
		out := src[i*share : (i+1)*share]
		wg.Go(func() {
			defer c.CloseWrite()
			c.SetWriteDeadline(deadline.Add(30 * time.Second))
			for off := 0; time.Now().Before(deadline); off += block {
				if off+block > len(out) {
					off = 0
				}
				if _, err := c.Write(out[off : off+block]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
