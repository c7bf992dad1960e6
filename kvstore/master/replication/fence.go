package replication

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fence is a leadership as the HA backend records it: for etcd the
// election key and the revision this master created it at, for Redis
// the master view hash and the owner token this master wrote into it.
// The master's GET /role confirms it in the backend before it says
// "leader" (Held), and reports a key found gone to the elector (Lost),
// which then steps down.
type Fence struct {
	held func(ctx context.Context) (bool, error)
	lost func()
}

// etcdFence is the leadership of the etcd key created at rev.
func etcdFence(cli *clientv3.Client, key string, rev int64, lost func()) *Fence {
	return &Fence{lost: lost, held: func(ctx context.Context) (bool, error) {
		resp, err := cli.Get(ctx, key) // a linearizable read
		if err != nil {
			return false, err
		}
		return len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == rev, nil
	}}
}

// Held reads the backend now and reports whether the leadership is
// still this master's; err when the backend did not answer.
func (f *Fence) Held(ctx context.Context) (bool, error) { return f.held(ctx) }

// Lost tells the elector that the key is gone.
func (f *Fence) Lost() { f.lost() }
