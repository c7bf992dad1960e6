package metadata

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/transfer/errcode"

	"github.com/mooncake-go/mooncake/internal/testutil"
)

func newTestEtcdStore(t *testing.T, endpoint string) *EtcdStore {
	t.Helper()
	s, err := NewEtcdStore([]string{endpoint})
	if err != nil {
		t.Fatalf("NewEtcdStore(%s): %v", endpoint, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestEtcdStore(t *testing.T) {
	ep := testutil.StartEtcd(t)
	s := newTestEtcdStore(t, ep)
	ctx := context.Background()
	const key = "mooncake/ram/127.0.0.1:1234"

	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	} else if errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Get missing: code %d, want %d", errcode.Of(err), errcode.Metadata)
	}

	v1 := []byte(`{"name":"127.0.0.1:1234","protocol":"tcp"}`)
	if err := s.Put(ctx, key, v1); err != nil {
		t.Fatalf("Put: %v", err)
	}
	got, err := s.Get(ctx, key)
	if err != nil || string(got) != string(v1) {
		t.Fatalf("Get = %q, %v; want %q", got, err, v1)
	}

	v2 := []byte(`{"v":2}`)
	if err := s.Put(ctx, key, v2); err != nil {
		t.Fatalf("Put overwrite: %v", err)
	}
	if got, err := s.Get(ctx, key); err != nil || string(got) != string(v2) {
		t.Fatalf("Get after overwrite = %q, %v", got, err)
	}

	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete missing: %v, want nil", err)
	}

	// A second client (another engine) sees what the first wrote, and a
	// bare host:port endpoint works as upstream's conn strings give it.
	if err := s.Put(ctx, "mooncake/rpc_meta/a", []byte(`{"rpc_port":1}`)); err != nil {
		t.Fatal(err)
	}
	other := newTestEtcdStore(t, ep[len("http://"):])
	if got, err := other.Get(ctx, "mooncake/rpc_meta/a"); err != nil || string(got) != `{"rpc_port":1}` {
		t.Fatalf("second client Get = %q, %v", got, err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestEtcdStoreOpenStore(t *testing.T) {
	ep := testutil.StartEtcd(t)
	conn, err := ParseConn("etcd://" + ep[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Open(conn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer ms.Close()
	ctx := context.Background()
	for i := range 3 {
		k := fmt.Sprintf("mooncake/ram/seg%d", i)
		if err := ms.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
		if got, err := ms.Get(ctx, k); err != nil || string(got) != k {
			t.Fatalf("Get %s = %q, %v", k, got, err)
		}
	}
}

func TestEtcdStoreNoEndpoints(t *testing.T) {
	if _, err := NewEtcdStore(nil); errcode.Of(err) != errcode.InvalidArgument {
		t.Fatalf("NewEtcdStore(nil) = %v, want invalid argument", err)
	}
	if _, err := NewEtcdStore([]string{" ", ""}); errcode.Of(err) != errcode.InvalidArgument {
		t.Fatalf("NewEtcdStore(blank) = %v, want invalid argument", err)
	}
}

func TestEtcdStoreDeadEndpoint(t *testing.T) {
	port := testutil.FreePorts(t, 1)[0] // nothing listens there
	s := newTestEtcdStore(t, fmt.Sprintf("127.0.0.1:%d", port))

	// The caller's deadline bounds the call.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Get(ctx, "k")
	if err == nil || errors.Is(err, ErrNotFound) || errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Get on dead etcd: err = %v, want a metadata error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Get on dead etcd took %v with a 300ms deadline", d)
	}

	// Without a deadline, the store's default one bounds it (shortened here).
	s.timeout = 300 * time.Millisecond
	start = time.Now()
	if err := s.Put(context.Background(), "k", []byte("v")); err == nil || errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Put on dead etcd: err = %v, want a metadata error", err)
	}
	err = s.Delete(context.Background(), "k")
	if err == nil {
		t.Fatal("Delete on dead etcd succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Put+Delete on dead etcd took %v with a 300ms default deadline", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dead etcd error %v does not wrap context.DeadlineExceeded", err)
	}
}

func TestEtcdStoreDefaultTimeout(t *testing.T) {
	s := &EtcdStore{timeout: etcdDefaultTimeout}
	ctx, cancel := s.bound(context.Background())
	defer cancel()
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > etcdDefaultTimeout || time.Until(dl) < etcdDefaultTimeout-time.Second {
		t.Fatalf("bound(no deadline) deadline = %v, %v; want ~%v", dl, ok, etcdDefaultTimeout)
	}
	parent, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	ctx2, cancel2 := s.bound(parent)
	defer cancel2()
	if dl2, _ := ctx2.Deadline(); dl2.Before(time.Now().Add(50 * time.Second)) {
		t.Fatalf("bound shortened the caller's deadline to %v", time.Until(dl2))
	}
}
