package client

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/gpu/gputest"
	"github.com/mooncake-go/mooncake/transfer"
)

// newDeviceClient is newClient over an engine whose GPU memory access is
// the fake driver d.
func newDeviceClient(t *testing.T, d *gputest.Driver, rpc, meta string, forceTCP bool) *Client {
	t.Helper()
	m := gpu.NewMemory(d, 32<<10)
	e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: meta, ForceTCP: forceTCP, Memory: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); m.Close() })
	c, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: meta, GlobalSegmentSize: 32 << 20, LocalBufferSize: 4 << 20, MasterServerAddr: rpc, Engine: e})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// devicePart allocates fake device memory holding data.
func devicePart(t *testing.T, d *gputest.Driver, data []byte) Part {
	t.Helper()
	p, err := gputest.Upload(d, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DeviceFree(p) })
	return Part{Addr: p, Size: uint64(len(data))}
}

// partsBytes reads parts (device or host) back through the driver.
func partsBytes(t *testing.T, d *gputest.Driver, parts []Part) []byte {
	t.Helper()
	var out []byte
	for _, p := range parts {
		b, err := d.Read(p.Addr, p.Size)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// TestDeviceMemoryPutGet stores objects from device memory and reads them
// into device memory, zero-copy and staged, single, batched and split over
// several buffers (device and host mixed), with checksums on. Fake device
// memory faults on direct access: a path that touched it would crash.
func TestDeviceMemoryPutGet(t *testing.T) {
	t.Setenv("MOONCAKE_STORE_CHECKSUM", "1")
	for _, forceTCP := range []bool{false, true} {
		t.Run(fmt.Sprintf("force_tcp=%v", forceTCP), func(t *testing.T) {
			rpc, meta := startMaster(t, nil)
			d := gputest.New()
			writer := newDeviceClient(t, d, rpc, meta, forceTCP)
			reader := newDeviceClient(t, d, rpc, meta, forceTCP)
			const n = 5<<20 + 77 // more than one staging chunk
			for _, zeroCopy := range []bool{true, false} {
				key := fmt.Sprintf("dev-%v", zeroCopy)
				want := fillPattern(make([]byte, n), byte(len(key)))
				src := devicePart(t, d, want)
				if err := writer.Put(key, []Part{src}, ReplicateConfig{ReplicaNum: 1}, PutOptions{ZeroCopy: zeroCopy}); err != nil {
					t.Fatalf("put (zero copy %v): %v", zeroCopy, err)
				}
				dst := devicePart(t, d, make([]byte, n))
				if r := reader.GetInto(key, []Part{dst}, zeroCopy); r.Err != nil || r.Size != n {
					t.Fatalf("get (zero copy %v): %+v", zeroCopy, r)
				}
				if !bytes.Equal(partsBytes(t, d, []Part{dst}), want) {
					t.Fatalf("zero copy %v: object read back differs", zeroCopy)
				}
			}
			// Batch, each object split over device and host buffers.
			keys := []string{"mix-a", "mix-b"}
			var puts, gets [][]Part
			var wants [][]byte
			for i := range keys {
				want := fillPattern(make([]byte, 3000+i), byte(i))
				host := buf(t, 1000)
				copy(host, want[1000:2000])
				puts = append(puts, []Part{devicePart(t, d, want[:1000]), {Addr: gpu.AddrOf(host), Size: 1000}, devicePart(t, d, want[2000:])})
				gets = append(gets, []Part{devicePart(t, d, make([]byte, 1500)), devicePart(t, d, make([]byte, 1500+i))})
				wants = append(wants, want)
			}
			for i, err := range writer.BatchPut(keys, puts, ReplicateConfig{ReplicaNum: 1}, PutOptions{ZeroCopy: true}) {
				if err != nil {
					t.Fatalf("batch put %s: %v", keys[i], err)
				}
			}
			for _, zeroCopy := range []bool{true, false} {
				for i, r := range reader.BatchGetInto(keys, gets, zeroCopy) {
					if r.Err != nil || r.Size != uint64(len(wants[i])) {
						t.Fatalf("batch get %s (zero copy %v): %+v", keys[i], zeroCopy, r)
					}
					if !bytes.Equal(partsBytes(t, d, gets[i]), wants[i]) {
						t.Fatalf("batch get %s (zero copy %v): data differs", keys[i], zeroCopy)
					}
				}
			}
			// A ranged read into device memory.
			dst := devicePart(t, d, make([]byte, 500))
			if r := reader.GetRanges([]Range{{Key: "mix-a", Dst: dst.Addr, SrcOffset: 900, Size: 500}})[0]; r.Err != nil || r.Size != 500 {
				t.Fatalf("ranged get: %+v", r)
			}
			if !bytes.Equal(partsBytes(t, d, []Part{dst}), wants[0][900:1400]) {
				t.Fatal("ranged get into device memory: data differs")
			}
		})
	}
}

// TestDeviceRegisteredBuffer registers device memory with the store
// (register_buffer) and moves objects through it zero-copy.
func TestDeviceRegisteredBuffer(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	d := gputest.New()
	c := newDeviceClient(t, d, rpc, meta, true)
	want := fillPattern(make([]byte, 1<<20), 7)
	region := devicePart(t, d, make([]byte, 2<<20))
	if err := c.RegisterBuffer(region.Addr, region.Size); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(region.Addr, want); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("reg", []Part{{Addr: region.Addr, Size: 1 << 20}}, ReplicateConfig{ReplicaNum: 1}, PutOptions{ZeroCopy: true}); err != nil {
		t.Fatal(err)
	}
	back := Part{Addr: region.Addr + 1<<20, Size: 1 << 20}
	if r := c.GetInto("reg", []Part{back}, true); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !bytes.Equal(partsBytes(t, d, []Part{back}), want) {
		t.Fatal("data differs")
	}
}
