package replication

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fence is a leadership as etcd records it: the election key and the
// revision this master created it at. The master's GET /role confirms
// it in etcd before it says "leader" (Held), and reports a key found
// gone to the elector (Lost), which then steps down.
type Fence struct {
	cli  *clientv3.Client
	key  string
	rev  int64
	lost func()
}

// Held reads the election key now (a linearizable read) and reports
// whether it is still the one this leadership created; err when etcd
// did not answer.
func (f *Fence) Held(ctx context.Context) (bool, error) {
	resp, err := f.cli.Get(ctx, f.key)
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == f.rev, nil
}

// Lost tells the elector that the key is gone.
func (f *Fence) Lost() { f.lost() }
