package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// client is one simulated store client with a connection of its own.
type client struct {
	id          string
	incarnation uint64
	secret      string
	seg         *pb.Segment // a storage client's segment; nil for a pure client

	mu   sync.Mutex
	addr string // the master conn is connected to
	conn *framedrpc.Client
	rpc  pb.MasterClient
}

// callTimeout bounds every call of the load generator.
const callTimeout = 10 * time.Second

func dialClient(addr string) (*client, error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	c := &client{id: hex.EncodeToString(raw[:8]), secret: hex.EncodeToString(raw[8:]),
		incarnation: uint64(raw[0])<<8 | uint64(raw[1]) | 1}
	if err := c.redial(addr); err != nil {
		return nil, err
	}
	return c, nil
}

// redial connects the client to the master at addr, closing its former
// connection.
func (c *client) redial(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	conn, err := framedrpc.Dial(ctx, addr, framedrpc.Options{
		Metadata: map[string]string{kvstore.ClientSecretMetadataKey: c.secret},
		Busy:     pollread.Busy{},
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	old := c.conn
	c.addr, c.conn, c.rpc = addr, conn, pb.NewMasterClient(conn)
	c.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// master is the client's connection's RPC stub and the address it dialled.
func (c *client) master() (pb.MasterClient, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rpc, c.addr
}

func (c *client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.Close()
}

// mount makes the client the i-th storage client and mounts its segment
// (a made-up address range: the master never reads it).
func (c *client) mount(i int) error {
	c.seg = &pb.Segment{
		Id: c.id + "-seg", Name: fmt.Sprintf("127.0.0.1:%d", 20000+i), Base: uint64(i+1) << 32, Size: segmentSize,
		TeEndpoint: fmt.Sprintf("127.0.0.1:%d", 20000+i), Protocol: "tcp", Incarnation: c.incarnation,
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, _ := c.master()
	resp, err := rpc.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: c.id, Segment: c.seg})
	return codeErr(resp.GetErrorCode(), err)
}

// ping sends one heartbeat and, when the master asks for it (a new
// leader), remounts the client's segment as the store client does.
// remounted reports that it did.
func (c *client) ping() (remounted bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, _ := c.master()
	resp, err := rpc.Ping(ctx, &pb.PingRequest{ClientId: c.id, Incarnation: c.incarnation})
	if err = codeErr(resp.GetErrorCode(), err); err != nil || resp.GetClientStatus() != pb.ClientStatus_CLIENT_NEED_REMOUNT || c.seg == nil {
		return false, err
	}
	rr, err := rpc.ReMountSegment(ctx, &pb.ReMountSegmentRequest{ClientId: c.id, Segments: []*pb.Segment{c.seg}})
	return true, codeErr(rr.GetErrorCode(), err)
}

func codeErr(code int32, err error) error {
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("error code %d (%v)", code, kvstore.ErrorCode(code))
	}
	return nil
}

// put writes the 4 KiB object key's metadata: put start, then put end
// (no data moves: the master never reads segment memory).
func (c *client) put(ctx context.Context, key string) error {
	rpc, _ := c.master()
	ps, err := rpc.PutStart(ctx, &pb.PutStartRequest{ClientId: c.id, Key: key, Size: objectSize,
		Config: &pb.ReplicateConfig{ReplicaNum: 1}})
	if err = codeErr(ps.GetErrorCode(), err); err != nil {
		return err
	}
	pe, err := rpc.PutEnd(ctx, &pb.PutEndRequest{ClientId: c.id, Key: key})
	return codeErr(pe.GetErrorCode(), err)
}

// follow redials the master view's leader when it is not the master the
// client talks to, as the store client follows the view.
func (c *client) follow(view *leaderView) error {
	if addr := view.get(); addr != "" {
		if _, cur := c.master(); cur != addr {
			return c.redial(addr)
		}
	}
	return nil
}

// probe puts, reads and checks 4 KiB objects at rate rounds/s for d and
// returns each call's latencies; any failed call fails the probe.
func (c *client) probe(d time.Duration, rate int) (put, get, exist []time.Duration, err error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		<-tick.C
		key := fmt.Sprintf("%064x", i)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		rpc, _ := c.master()
		t0 := time.Now()
		err := c.put(ctx, key)
		t1 := time.Now()
		var gr *pb.GetReplicaListResponse
		if err == nil {
			gr, err = rpc.GetReplicaList(ctx, &pb.KeyRequest{Key: key})
			err = codeErr(gr.GetErrorCode(), err)
		}
		t2 := time.Now()
		var ex *pb.ExistKeyResponse
		if err == nil {
			ex, err = rpc.ExistKey(ctx, &pb.KeyRequest{Key: key})
			err = codeErr(ex.GetErrorCode(), err)
		}
		t3 := time.Now()
		cancel()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("round %d: %w", i, err)
		}
		if !ex.GetExists() {
			return nil, nil, nil, fmt.Errorf("round %d: %s put and not found", i, key)
		}
		put, get, exist = append(put, t1.Sub(t0)), append(get, t2.Sub(t1)), append(exist, t3.Sub(t2))
	}
	return put, get, exist, nil
}
