package framedrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"runtime"
	"testing"
)

// callFrame is one well-formed call frame.
func callFrame(method, req string) []byte {
	b, err := finishFrame(append(appendHeader(nil, kindCall, method), req...))
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzFrameReader decodes fuzzed bytes as a stream of frames, as both the
// server (calls) and the client (replies, errors) read them: every frame
// it returns obeys the format, and every stop is the stream's clean end
// or a malformed frame.
func FuzzFrameReader(f *testing.F) {
	f.Add(callFrame("/mooncake.Master/Get", "\x0a\x03key"))
	f.Add(append(callFrame("/m/A", ""), callFrame("/m/B", "xyz")...))
	reply, _ := finishFrame(append(appendHeader(nil, kindReply, ""), "ok"...))
	f.Add(reply)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, kindCall, 0, 0, 0})         // body over MaxBody
	f.Add([]byte{4, 0, 0, 0, kindCall, 0, 9, 0, 'a', 'b', 'c', 'd'}) // method longer than the body
	f.Add([]byte{0, 0, 0x10, 0, kindReply, 0, 0, 0, 1, 2, 3})        // 1 MiB announced, 3 bytes sent
	f.Add([]byte{0, 0, 0x20, 0, kindReply, 0, 0, 0, 1, 2, 3})        // over keepBuffer, truncated
	f.Add([]byte{2, 0, 0, 0, 7, 0, 0, 0, 'h', 'i'})                  // unknown kind
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := newFrameReader(bytes.NewReader(in))
		off := 0
		for {
			fr0, err := fr.next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errBadFrame) {
					t.Fatalf("error %v, want io.EOF or a malformed frame", err)
				}
				if errors.Is(err, io.EOF) && !errors.Is(err, errBadFrame) && off != len(in) {
					t.Fatalf("clean end at %d of %d bytes", off, len(in))
				}
				return
			}
			n := int(binary.LittleEndian.Uint32(in[off:]))
			if n > MaxBody || off+headerLen+n > len(in) || len(fr0.method)+len(fr0.body) != n ||
				!bytes.Equal(append(append([]byte(nil), fr0.method...), fr0.body...), in[off+headerLen:off+headerLen+n]) {
				t.Fatalf("frame at %d decoded as %d+%d bytes; not the stream's", off, len(fr0.method), len(fr0.body))
			}
			if fr0.kind != kindCall && len(fr0.method) != 0 {
				t.Fatalf("a kind %d frame with a method", fr0.kind)
			}
			off += headerLen + n
		}
	})
}

// FuzzReadHello decodes a fuzzed hello (after the magic); what decodes
// encodes back to the same metadata.
func FuzzReadHello(f *testing.F) {
	for _, md := range []map[string]string{{}, {"authorization": "x", "tenant": "t"}, {"": ""}} {
		b, err := encodeHello(md)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[len(Magic):])
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})          // over maxHello
	f.Add([]byte{5, 0, 0, 0, 9, 0, 'a', 'b', 'c'}) // field longer than the block
	f.Fuzz(func(t *testing.T, in []byte) {
		md, err := readHello(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, errBadFrame) {
				t.Fatalf("error %v, want a malformed frame", err)
			}
			return
		}
		b, err := encodeHello(md)
		if err != nil {
			t.Fatalf("decoded metadata does not encode: %v", err)
		}
		again, err := readHello(bytes.NewReader(b[len(Magic):]))
		if err != nil || !maps.Equal(again, md) {
			t.Fatalf("round trip: %v, %v", again, err)
		}
	})
}

func TestHeaderAloneDoesNotAllocateItsBody(t *testing.T) {
	hdr := []byte{0, 0, 0, 0, kindReply, 0, 0, 0}
	binary.LittleEndian.PutUint32(hdr, MaxBody)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := newFrameReader(bytes.NewReader(append(hdr, "just a few bytes"...))).next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errBadFrame) {
		t.Fatalf("truncated body: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("a header announcing %d bytes and 16 bytes of body allocated %d bytes", MaxBody, got)
	}
}
