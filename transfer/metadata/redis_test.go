package metadata

import (
	"context"
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// TestRedisStore runs the metadata store on a real redis-server opened
// from upstream's connection string, with a password and a database from
// MC_REDIS_*: values are stored under the keys as they are (another
// Redis client reads them), a missing key is ErrNotFound, deleting one
// is no error.
func TestRedisStore(t *testing.T) {
	addr := testutil.StartRedis(t, "--requirepass", "metapw")
	t.Setenv("MC_REDIS_PASSWORD", "metapw")
	t.Setenv("MC_REDIS_DB_INDEX", "2")
	conn, err := ParseConn("redis://" + addr)
	if err != nil || conn.Kind != "redis" || conn.Host() != "127.0.0.1" {
		t.Fatalf("ParseConn = %+v, %v", conn, err)
	}
	s, err := Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const key = "mooncake/ram/127.0.0.1:1234"
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) || errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Get missing: %v", err)
	}
	v := []byte(`{"name":"127.0.0.1:1234","protocol":"tcp"}`)
	if err := s.Put(ctx, key, v); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, key); err != nil || string(got) != string(v) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	raw := redis.New(redis.Options{Addr: addr, Password: "metapw", DB: 2})
	defer raw.Close()
	if got, ok, err := raw.Get(ctx, key); err != nil || !ok || string(got) != string(v) {
		t.Fatalf("the value under %s in db 2 is %q %v %v", key, got, ok, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}

	t.Setenv("MC_REDIS_PASSWORD", "wrong")
	bad, err := Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Put(ctx, key, v); err == nil || errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Put with a wrong password: %v", err)
	}
}

func TestRedisConnRefused(t *testing.T) {
	for _, s := range []string{"redis://", "redis://h:1/db", "redis://h1:1,h2:2"} {
		if _, err := ParseConn(s); errcode.Of(err) != errcode.InvalidArgument {
			t.Errorf("ParseConn(%q) = %v, want invalid argument", s, err)
		}
	}
}
