package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// impostor calls the master at addr as storage client a (its client id
// and segment, another secret) and checks every call is refused with
// ILLEGAL_CLIENT; it returns how many calls it made.
func impostor(t *testing.T, addr string, a segment) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := masterpb.NewMasterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := 0
	for _, secret := range []string{"", "a-secret-that-is-not-a-s-secret"} {
		cctx := ctx
		if secret != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, kvstore.ClientSecretMetadataKey, secret)
		}
		u, err := c.UnmountSegment(cctx, &masterpb.UnmountSegmentRequest{ClientId: a.ClientID, SegmentId: a.ID})
		if err != nil || kvstore.ErrorCode(u.GetErrorCode()) != kvstore.IllegalClient {
			t.Fatalf("impostor's unmount of a's segment (secret %q): %v %v, want ILLEGAL_CLIENT", secret, u, err)
		}
		p, err := c.Ping(cctx, &masterpb.PingRequest{ClientId: a.ClientID})
		if err != nil || kvstore.ErrorCode(p.GetErrorCode()) != kvstore.IllegalClient {
			t.Fatalf("impostor's ping as a (secret %q): %v %v, want ILLEGAL_CLIENT", secret, p, err)
		}
		calls += 2
	}
	return calls
}

// heardFrom waits until the master behind adm has served at least two
// more pings than now (every storage client pings once a second) while
// refusing no call beyond the refused ones, and a's segment stays mounted.
func heardFrom(t *testing.T, adm admin, a segment, refused int) {
	t.Helper()
	start := adm.metrics(t)["master_ping_requests_total"]
	testutil.WaitUntil(t, 30*time.Second, "the storage client's pings to be served", func() bool {
		return adm.metrics(t)["master_ping_requests_total"] >= start+2
	})
	if got := adm.metrics(t)["master_client_identity_refused_total"]; got != float64(refused) {
		t.Fatalf("master_client_identity_refused_total = %v, want %d (the impostor's calls only)", got, refused)
	}
	if segs := adm.segmentsNamed(t, a.Name); len(segs) != 1 || segs[0].ClientID != a.ClientID {
		t.Fatalf("a's segment after the impostor: %+v", segs)
	}
}

// TestBinaryRefusesAnotherClientsID runs a master, a storage client in
// its own process (a) and a writer (b): a process that names a's client
// id (from the admin API) without a's secret can neither unmount a's
// segment nor ping as a; the refusals are counted on /metrics, while a
// keeps pinging and b keeps writing into a's memory and reading it back.
func TestBinaryRefusesAnotherClientsID(t *testing.T) {
	r := newStoreRig(t, false)
	segs := r.admin.segmentsNamed(t, r.aHost)
	if len(segs) != 1 {
		t.Fatalf("a's segments: %+v", segs)
	}
	a := segs[0]
	refused := impostor(t, r.masterAddr, a)
	heardFrom(t, r.admin, a, refused)
	if !r.put(t, "after-impostor", r.aHost) {
		t.Fatal("put into a's segment after the impostor failed")
	}
	if same, err := r.get(t, "after-impostor"); err != nil || !same {
		t.Fatalf("get after the impostor: same bytes %v, %v", same, err)
	}
}

// TestBinaryClientKeepsItsIdentityAcrossFailover: two HA masters with the
// oplog and a storage client following the leader through etcd. After a
// kill -9 of the leader, the new leader knows the client's secret from
// the log: it refuses an impostor and serves the client's own calls.
func TestBinaryClientKeepsItsIdentityAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a fail-over takes ~10 s")
	}
	etcd := testutil.StartEtcd(t)
	ports := testutil.FreePorts(t, 5)
	rpc := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	adm := []admin{admin(fmt.Sprintf("http://127.0.0.1:%d", ports[2])), admin(fmt.Sprintf("http://127.0.0.1:%d", ports[3]))}
	role := func(i int) string {
		resp, err := http.Get(string(adm[i]) + "/role")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	procs := make([]*proc, 2)
	for i := range procs {
		procs[i] = startMaster(t, "--enable_ha", "--enable_oplog", "--etcd_endpoints", etcd,
			"--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", ports[i]),
			"--metrics_host=127.0.0.1", fmt.Sprintf("--metrics_port=%d", ports[2+i]))
		waitHTTP(t, procs[i], string(adm[i])+"/health")
	}
	leader := -1
	testutil.WaitUntil(t, 30*time.Second, "a leader", func() bool {
		for i := range procs {
			if role(i) == "leader" {
				leader = i
				return true
			}
		}
		return false
	})
	standby := 1 - leader
	host := fmt.Sprintf("127.0.0.1:%d", ports[4])
	startStorage(t, host, "etcd://"+etcd, "etcd://"+etcd)
	segs := adm[leader].segmentsNamed(t, host)
	if len(segs) != 1 {
		t.Fatalf("the storage client's segments: %+v", segs)
	}
	a := segs[0]
	if err := procs[leader].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-procs[leader].exited
	testutil.WaitUntil(t, 30*time.Second, "the standby to lead", func() bool { return role(standby) == "leader" })
	refused := impostor(t, rpc[standby], a)
	heardFrom(t, adm[standby], a, refused)
}
