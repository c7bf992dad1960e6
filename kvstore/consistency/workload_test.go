package consistency

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// Environment of a worker or storage process (set by cluster.go).
const (
	envMaster = "MC_CONSISTENCY_MASTER"   // etcd://host:port
	envMeta   = "MC_CONSISTENCY_METADATA" // the TE metadata server
	envWorker = "MC_CONSISTENCY_WORKER"   // worker number, from 1
	envSeed   = "MC_CONSISTENCY_SEED"
	envKeys   = "MC_CONSISTENCY_KEYS" // names from workloadKeys, comma-separated; all when unset
	envOps    = "MC_CONSISTENCY_OPS"  // OpKinds drawn uniformly, comma-separated; opMix when unset
	// envSegment is a storage client's segment in MiB; 64 when unset.
	envSegment = "MC_CONSISTENCY_SEGMENT_MIB"
)

// keySpec is one key of the workload and the sizes its values take: a key
// with one size is only ever overwritten in place (a same-size upsert),
// one with several sizes also gets new buffers (a different-size upsert).
type keySpec struct {
	name  string
	sizes []int
}

// workloadKeys is the small key set every worker draws from, so that
// operations on one key overlap.
var workloadKeys = []keySpec{
	{"small-a", []int{200, 4 << 10, 20 << 10}},
	{"small-b", []int{200, 4 << 10, 20 << 10}},
	{"same-64k", []int{64 << 10}},
	{"same-256k", []int{256 << 10}},
	{"same-1m", []int{1 << 20}},
	{"mixed", []int{64 << 10, 1 << 20}},
}

const (
	maxValue = 1 << 20
	maxBatch = 3
	// failurePause spaces a worker's operations after a failure, so that
	// an outage leaves a bounded number of open writes in the history.
	failurePause = 30 * time.Millisecond
)

// connect sets a client up, retrying while the cluster has no leader.
func connect(segment uint64) (*client.Client, error) {
	cfg := client.Config{
		LocalHostname:     "127.0.0.1",
		MetadataServer:    os.Getenv(envMeta),
		GlobalSegmentSize: segment,
		LocalBufferSize:   16 << 20,
		Protocol:          "tcp",
		MasterServerAddr:  os.Getenv(envMaster),
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := client.New(cfg)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopOnEOF returns a flag set when stdin closes: the parent's signal to
// stop.
func stopOnEOF() *atomic.Bool {
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	return &stop
}

// runStorage is a storage client: it mounts a segment and serves it until
// stdin closes.
func runStorage() int {
	stop := stopOnEOF()
	mib := 64
	if v := os.Getenv(envSegment); v != "" {
		var err error
		if mib, err = strconv.Atoi(v); err != nil || mib <= 0 {
			fmt.Fprintf(os.Stderr, "storage setup: %s=%q is not a positive number of MiB\n", envSegment, v)
			return 1
		}
	}
	c, err := connect(uint64(mib) << 20)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storage setup:", err)
		return 1
	}
	fmt.Println("READY")
	for !stop.Load() {
		time.Sleep(50 * time.Millisecond)
	}
	c.Close()
	return 0
}

// worker runs random operations and writes every call and return as a
// Record line on stdout.
type worker struct {
	id int
	// cautious is set by a write that failed: until the master answers
	// again, the worker only reads, so that an outage leaves one open
	// write per worker in the history, not one per attempt.
	cautious bool
	keySet   []keySpec // the keys it uses
	ops      []OpKind  // set from envOps
	c        *client.Client
	rng      *rand.Rand
	out      *bufio.Writer
	op       uint64
	seq      uint32
	wbufs    [maxBatch][]byte
	rbufs    [maxBatch][]byte
}

func runWorker() int {
	stop := stopOnEOF()
	id, _ := strconv.Atoi(os.Getenv(envWorker))
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	c, err := connect(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker setup:", err)
		return 1
	}
	defer c.Close()
	w := &worker{id: id, c: c, rng: rand.New(rand.NewPCG(seed, uint64(id))), out: bufio.NewWriter(os.Stdout), keySet: workloadKeys}
	if names := os.Getenv(envKeys); names != "" {
		w.keySet = nil
		for _, k := range workloadKeys {
			if slices.Contains(strings.Split(names, ","), k.name) {
				w.keySet = append(w.keySet, k)
			}
		}
		if len(w.keySet) == 0 {
			fmt.Fprintf(os.Stderr, "%s=%q names no key\n", envKeys, names)
			return 1
		}
	}
	if kinds := os.Getenv(envOps); kinds != "" {
		for _, k := range strings.Split(kinds, ",") {
			w.ops = append(w.ops, OpKind(k))
		}
	}
	for i := range maxBatch {
		// mmap'd, not Go heap: the transfer engine writes into it.
		if w.wbufs[i], err = unix.Mmap(-1, 0, maxValue, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if w.rbufs[i], err = unix.Mmap(-1, 0, maxValue, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Fprintln(w.out, "READY")
	w.out.Flush()
	for !stop.Load() {
		if !w.step() {
			time.Sleep(failurePause)
		}
	}
	w.out.Flush()
	return 0
}

// step runs one random operation; it reports whether the master answered
// it.
func (w *worker) step() bool {
	if w.cautious {
		answered := w.get(Get, w.keys(1))
		w.cautious = !answered
		return answered
	}
	kind := w.pick()
	switch kind {
	case Put, Upsert:
		return w.write(kind, w.keys(1))
	case Get:
		return w.get(Get, w.keys(1))
	case Remove:
		return w.remove(w.keys(1)[0])
	case Exist:
		return w.exist(w.keys(1)[0])
	case BatchPut:
		return w.write(BatchPut, w.keys(2+w.rng.IntN(maxBatch-1)))
	default:
		return w.get(BatchGet, w.keys(2+w.rng.IntN(maxBatch-1)))
	}
}

// opMix is how often each operation is drawn, in percent.
var opMix = []struct {
	kind    OpKind
	percent int
}{{Put, 12}, {Upsert, 30}, {Get, 28}, {Remove, 8}, {Exist, 8}, {BatchPut, 7}, {BatchGet, 7}}

// pick draws the next operation: from opMix, or uniformly from the kinds
// envOps names.
func (w *worker) pick() OpKind {
	if len(w.ops) > 0 {
		return w.ops[w.rng.IntN(len(w.ops))]
	}
	r := w.rng.IntN(100)
	for _, m := range opMix {
		if r < m.percent {
			return m.kind
		}
		r -= m.percent
	}
	return opMix[len(opMix)-1].kind
}

// keys picks n distinct keys (fewer when the key set is smaller).
func (w *worker) keys(n int) []keySpec {
	perm := w.rng.Perm(len(w.keySet))
	out := make([]keySpec, min(n, len(perm)))
	for i := range out {
		out[i] = w.keySet[perm[i]]
	}
	return out
}

func names(ks []keySpec) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.name
	}
	return out
}

func (w *worker) emit(r Record) {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	w.out.Write(b)
	w.out.WriteByte('\n')
	w.out.Flush()
}

// call records an operation's invocation and returns its number.
func (w *worker) call(kind OpKind, keys []string, vals []ValueID) uint64 {
	w.op++
	w.emit(Record{Type: "call", Worker: w.id, Op: w.op, Time: Now(), Kind: kind, Keys: keys, Values: vals})
	return w.op
}

// ret records an operation's return; it reports whether the master
// answered every key (the operation did not fail on the way).
func (w *worker) ret(op uint64, res []Result) bool {
	w.emit(Record{Type: "ret", Worker: w.id, Op: op, Time: Now(), Results: res})
	for _, r := range res {
		switch kvstore.ErrorCode(r.Code) {
		case kvstore.OK, 1, kvstore.ObjectNotFound, kvstore.ObjectAlreadyExists, kvstore.ObjectHasLease,
			kvstore.ReplicaIsNotReady, kvstore.LeaseExpired:
		default:
			return false
		}
	}
	return true
}

func part(b []byte) []client.Part { return []client.Part{{Addr: gpu.AddrOf(b), Size: uint64(len(b))}} }

// write puts or upserts a new value into each key (kind Put, Upsert or
// BatchPut).
func (w *worker) write(kind OpKind, ks []keySpec) bool {
	keys := names(ks)
	vals := make([]ValueID, len(ks))
	parts := make([][]client.Part, len(ks))
	for i, k := range ks {
		w.seq++
		vals[i] = ValueID{Writer: uint32(w.id), Seq: w.seq}
		b := w.wbufs[i][:k.sizes[w.rng.IntN(len(k.sizes))]]
		Encode(b, k.name, vals[i])
		parts[i] = part(b)
	}
	op := w.call(kind, keys, vals)
	errs := w.c.BatchPut(keys, parts, client.DefaultReplicateConfig(), client.PutOptions{Upsert: kind == Upsert})
	res := make([]Result, len(ks))
	for i, err := range errs {
		res[i].Code = int(kvstore.CodeOf(err))
	}
	answered := w.ret(op, res)
	w.cautious = !answered
	return answered
}

// get reads each key and decodes what it read (kind Get or BatchGet).
func (w *worker) get(kind OpKind, ks []keySpec) bool {
	keys := names(ks)
	op := w.call(kind, keys, nil)
	got := w.c.BatchGet(keys, func(i int, n uint64) ([]client.Part, error) {
		if n > maxValue {
			return nil, kvstore.InvalidParams
		}
		return part(w.rbufs[i][:n]), nil
	})
	res := make([]Result, len(ks))
	for i, g := range got {
		res[i].Code = int(kvstore.CodeOf(g.Err))
		if g.Err != nil {
			continue
		}
		res[i].Size = int(g.Size)
		id, err := Decode(w.rbufs[i][:g.Size], keys[i])
		if err != nil {
			res[i].Torn = err.Error()
		} else {
			res[i].Read = id
		}
	}
	return w.ret(op, res)
}

func (w *worker) remove(k keySpec) bool {
	op := w.call(Remove, []string{k.name}, nil)
	return w.ret(op, []Result{{Code: w.c.BatchRemove([]string{k.name}, false)[0]}})
}

func (w *worker) exist(k keySpec) bool {
	op := w.call(Exist, []string{k.name}, nil)
	return w.ret(op, []Result{{Code: w.c.BatchExist([]string{k.name})[0]}})
}
