package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// serveRoundTrips listens on listen, says where on stderr, and answers
// round trips there (answerRoundTrips) until killed.
func serveRoundTrips(listen string, block int, stderr io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Fprintf(stderr, "listening %s\n", ln.Addr())
	return answerRoundTrips(ln, block)
}

// answerRoundTrips accepts connections on ln and, on each, answers every
// block-sized message with the same bytes, until the peer closes it; it
// returns when ln is closed.
func answerRoundTrips(ln net.Listener, block int) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			buf := make([]byte, block)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// measureRoundTrips sends block bytes to an rtt-serve at addr and waits
// for them to come back, one round trip after the other, for d (after 10
// untimed ones), over one connection (TCP_NODELAY, Go's default).
func measureRoundTrips(addr string, block int, d time.Duration) (result, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d + 30*time.Second))
	out, in := newTouched(block, 1), make([]byte, block)
	trip := func() error {
		if _, err := c.Write(out); err != nil {
			return err
		}
		_, err := io.ReadFull(c, in)
		return err
	}
	for range 10 {
		if err := trip(); err != nil {
			return result{}, err
		}
	}
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		if err := trip(); err != nil {
			return result{}, err
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	r := result{Kind: "rtt", BlockSize: block, Footprint: block, RoundTrip: len(lat)}
	r.finish(uint64(2*block*len(lat)), elapsed)
	r.P50us = float64(lat[len(lat)/2]) / 1e3
	r.P99us = float64(lat[min(len(lat)-1, len(lat)*99/100)]) / 1e3
	return r, nil
}
