package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/transfer/errcode"
	"github.com/mooncake-go/mooncake/transfer/handshake"
)

// callTimeout bounds one call to a Store.
const callTimeout = 5 * time.Second

// Location is where a segment's handshake listener is.
type Location struct {
	Host    string // the host peers reach the segment at
	RPCAddr string // host:port of its handshake listener
}

// Directory publishes this engine's segment and finds others by name.
type Directory interface {
	// Publish stores the handshake address and descriptor document of
	// the segment name (a no-op in P2P mode, where peers ask).
	Publish(name string, rpc RPCMeta, desc []byte) error
	// PublishDescriptor stores a new descriptor document of name.
	PublishDescriptor(name string, desc []byte) error
	// Lookup finds the segment name: where its handshake listener is,
	// and its descriptor document.
	Lookup(name string) (Location, []byte, error)
	// Withdraw removes what Publish stored, within a few seconds.
	Withdraw(name string)
	// Close releases the backend.
	Close() error
}

// P2P is the Directory of P2PHANDSHAKE mode: a segment's name is the
// host:port of its handshake listener, and its descriptor is asked of it
// there (each exchange bounded by Timeout, replies by MaxFrame bytes).
type P2P struct {
	Timeout  time.Duration
	MaxFrame uint64
}

// Publish does nothing: peers ask the segment itself.
func (P2P) Publish(string, RPCMeta, []byte) error { return nil }

// PublishDescriptor does nothing: peers ask the segment itself.
func (P2P) PublishDescriptor(string, []byte) error { return nil }

// Lookup asks the segment at name (host:port) for its descriptor.
func (p P2P) Lookup(name string) (Location, []byte, error) {
	host, _, err := net.SplitHostPort(name)
	if err != nil {
		return Location{}, nil, errcode.Errorf(errcode.InvalidArgument, err, "P2P segment name %q is not host:port", name)
	}
	raw, err := handshake.Call(name, handshake.FrameMetadata, []byte("{}"), p.Timeout, p.MaxFrame)
	if err != nil {
		return Location{}, nil, err
	}
	return Location{Host: host, RPCAddr: name}, raw, nil
}

// Withdraw does nothing: there is nothing published.
func (P2P) Withdraw(string) {}

// Close does nothing.
func (P2P) Close() error { return nil }

// StoreDirectory is the Directory over a Store, in upstream's key layout
// under a cluster id's prefix.
type StoreDirectory struct {
	store Store
	keys  keys
}

// NewStoreDirectory publishes in store under clusterID ("" for none).
func NewStoreDirectory(store Store, clusterID string) *StoreDirectory {
	return &StoreDirectory{store: store, keys: keysOfCluster(clusterID)}
}

// Publish stores rpc_meta/<name> and the descriptor.
func (d *StoreDirectory) Publish(name string, rpc RPCMeta, desc []byte) error {
	b, _ := json.Marshal(rpc)
	if err := d.put(d.keys.rpcMeta(name), b); err != nil {
		return err
	}
	return d.PublishDescriptor(name, desc)
}

// PublishDescriptor stores the descriptor under ram/<name>.
func (d *StoreDirectory) PublishDescriptor(name string, desc []byte) error {
	return d.put(d.keys.segment(name), desc)
}

// Lookup reads rpc_meta/<name> and the descriptor.
func (d *StoreDirectory) Lookup(name string) (Location, []byte, error) {
	b, err := d.get(d.keys.rpcMeta(name))
	if err != nil {
		return Location{}, nil, err
	}
	rpc, err := decodeRPCMeta(b)
	if err != nil {
		return Location{}, nil, errcode.Errorf(errcode.MalformedJSON, err, "%s", d.keys.rpcMeta(name))
	}
	raw, err := d.get(d.keys.segment(name))
	if err != nil {
		return Location{}, nil, err
	}
	return Location{Host: rpc.Host, RPCAddr: net.JoinHostPort(rpc.Host, strconv.Itoa(rpc.RPCPort))}, raw, nil
}

// decodeRPCMeta parses an rpc_meta document, which any writer of the
// metadata store may have put there: the host must be a plain host name or
// address and the port one a socket can have.
func decodeRPCMeta(b []byte) (RPCMeta, error) {
	var rpc RPCMeta
	if err := json.Unmarshal(b, &rpc); err != nil {
		return RPCMeta{}, err
	}
	if rpc.RPCPort < 1 || rpc.RPCPort > 65535 {
		return RPCMeta{}, fmt.Errorf("rpc_port %d outside 1..65535", rpc.RPCPort)
	}
	if rpc.Host == "" || strings.ContainsAny(rpc.Host, "/?#@[] \t\r\n") {
		return RPCMeta{}, fmt.Errorf("bad host %q", rpc.Host)
	}
	return rpc, nil
}

// Withdraw deletes both documents, giving up after 3 s.
func (d *StoreDirectory) Withdraw(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d.store.Delete(ctx, d.keys.segment(name))
	d.store.Delete(ctx, d.keys.rpcMeta(name))
}

// Close closes the store.
func (d *StoreDirectory) Close() error { return d.store.Close() }

func (d *StoreDirectory) put(key string, val []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := d.store.Put(ctx, key, val); err != nil {
		return errcode.Errorf(errcode.Metadata, err, "publish %s", key)
	}
	return nil
}

func (d *StoreDirectory) get(key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	b, err := d.store.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil, errcode.Errorf(errcode.Metadata, err, "segment not published (%s)", key)
	}
	if err != nil {
		return nil, errcode.Errorf(errcode.Metadata, err, "read %s", key)
	}
	return b, nil
}
