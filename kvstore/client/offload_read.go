package client

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file reads LOCAL_DISK replicas: the holder's offload server loads
// the object into its registered staging buffer, this client reads it
// from there with the Transfer Engine and releases the buffer.

// readFrom reads the first n bytes of the object from replica r into
// parts, from memory or from a holder's disk.
func (c *Client) readFrom(parts []Part, r *pb.ReplicaDescriptor, n uint64, staged bool) error {
	switch r.GetReplicaType() {
	case pb.ReplicaType_REPLICA_LOCAL_DISK:
		return c.readDisk(parts, r, n, staged)
	case pb.ReplicaType_REPLICA_DISK:
		return c.readFS(parts, r, n)
	}
	return c.readReplica(parts, r, 0, n, staged)
}

// readDisk reads a LOCAL_DISK replica. A holder that cannot be reached is
// TRANSFER_FAIL (the next replica is tried); a record that fails its
// checksum is CHECKSUM_MISMATCH.
func (c *Client) readDisk(parts []Part, r *pb.ReplicaDescriptor, n uint64, staged bool) error {
	peer, err := c.disk.peers.get(r.GetTransportEndpoint())
	if err != nil {
		return fmt.Errorf("%w: offload server %s: %v", kvstore.TransferFail, r.GetTransportEndpoint(), err)
	}
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := peer.BatchGetOffloadObject(ctx, &pb.BatchGetOffloadObjectRequest{Keys: []string{r.GetDiskObjectKey()}, Sizes: []uint64{n}})
	if err != nil {
		return fmt.Errorf("%w: offload server %s: %v", kvstore.TransferFail, r.GetTransportEndpoint(), err)
	}
	defer peer.ReleaseOffloadBuffer(ctx, &pb.ReleaseOffloadBufferRequest{BatchId: resp.GetBatchId()})
	if err := kvstore.ErrorCode(resp.GetErrorCode()).Err(); err != nil {
		return err
	}
	if len(resp.GetErrorCodes()) != 1 || len(resp.GetPointers()) != 1 {
		return fmt.Errorf("%w: offload server %s answered %d results for 1 key", kvstore.TransferFail, r.GetTransportEndpoint(), len(resp.GetPointers()))
	}
	if err := kvstore.ErrorCode(resp.GetErrorCodes()[0]).Err(); err != nil {
		return err
	}
	staging := &pb.ReplicaDescriptor{TransportEndpoint: resp.GetTransferEngineAddr(), BufferAddress: resp.GetPointers()[0], Size: n}
	return c.readReplica(parts, staging, 0, n, staged)
}

// peerConns are connections to other clients' offload servers, by
// host:port, dialed on first use.
type peerConns struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (p *peerConns) get(endpoint string) (pb.OffloadPeerClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[endpoint]; ok {
		return pb.NewOffloadPeerClient(cc), nil
	}
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[endpoint] = cc
	return pb.NewOffloadPeerClient(cc), nil
}

func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = nil
}

// disk is the master's DiskTier service on the current connection.
func (m *masterConn) disk() pb.DiskTierClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.diskTM
}
