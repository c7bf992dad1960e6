package standalone

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// nobody is the uid and gid the other user's process runs as.
const nobody = 65534

// Environment of the child that plays another local user.
const (
	envPeerAddr = "MC_TEST_PEER_ADDR" // the daemon's server_address
	envPeerKey  = "MC_TEST_PEER_KEY"  // the object it tries to read, then removes everything
)

// TestPeerChild is the other user's process (run by asUser): it sets up a
// dummy, reads an object and calls remove_all, and prints what happened.
func TestPeerChild(t *testing.T) {
	addr := os.Getenv(envPeerAddr)
	if addr == "" {
		t.Skip("runs only as the child of the peer credential tests")
	}
	d, err := NewDummy(DummyConfig{ServerAddress: addr, LocalBufferSize: 1 << 20, Scope: "intruder"})
	if err != nil {
		os.Stdout.WriteString("PEER-RESULT: refused: " + err.Error() + "\n")
		return
	}
	defer d.Close()
	buf := make([]byte, 4096)
	r := d.BatchGetInto([]string{os.Getenv(envPeerKey)}, [][]client.Part{{{Addr: gpu.AddrOf(buf), Size: 4096}}}, true)
	n, err := d.RemoveAll(true)
	fmt.Printf("PEER-RESULT: served: read %q; remove_all %d %v\n", buf[:r[0].Size], n, err)
}

// testAsUser returns a command that runs the test named run of a copy of
// this test binary as uid/gid (no supplementary groups), with env added to
// the environment; it skips the calling test when it is not root.
func testAsUser(t *testing.T, uid, gid uint32, run string, env ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process of another user")
	}
	// The test binary lies in a directory only its owner may enter: the
	// other user runs a copy.
	dir, err := os.MkdirTemp("", "mc-as-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "child.test")
	copyFile(t, exe)
	cmd := exec.Command(exe, "-test.run=^"+run+"$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	return cmd
}

// asUser runs TestPeerChild as uid/gid (no supplementary groups) against
// the daemon at addr and returns its result line.
func asUser(t *testing.T, uid, gid uint32, addr, key string) string {
	t.Helper()
	cmd := testAsUser(t, uid, gid, "TestPeerChild", envPeerAddr+"="+addr, envPeerKey+"="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child as uid %d: %v\n%s", uid, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "PEER-RESULT: "); ok {
			return rest
		}
	}
	t.Fatalf("the child as uid %d said nothing:\n%s", uid, out)
	return ""
}

func copyFile(t *testing.T, dst string) {
	t.Helper()
	src, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// putSecret stores an object through a dummy of the daemon's own user.
func putSecret(t *testing.T, addr string) (key string, owner *Dummy) {
	t.Helper()
	owner = dummy(t, addr, "owner")
	key, val := "secret", []byte("the owner's bytes")
	if errs := owner.BatchPut([]string{key}, [][]client.Part{{{Addr: gpu.AddrOf(val), Size: uint64(len(val))}}},
		client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	return key, owner
}

func TestAnotherUserIsRefusedAtAccept(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{})
	key, owner := putSecret(t, addr) // the daemon's own uid is served
	got := asUser(t, nobody, nobody, addr, key)
	if !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, "RPC_FAIL") {
		t.Fatalf("uid %d, not allowed, was %s", nobody, got)
	}
	if srv.Refused() == 0 {
		t.Fatal("the daemon counted no refused connection")
	}
	if m := srv.MetricsText(); !strings.Contains(m, fmt.Sprintf("\nmooncake_client_refused_connections_total %d\n", srv.Refused())) {
		t.Fatalf("/metrics does not count the refused connection:\n%s", m)
	}
	if m := srv.MetricsText(); !strings.Contains(m, "\nmooncake_te_tcp_refused_peers_total 0\n") {
		t.Fatalf("/metrics lacks the real client's Transfer Engine counters:\n%s", m)
	}
	if ex := owner.BatchExist([]string{key}); ex[0] != 1 {
		t.Fatalf("the owner's object is gone after the other user's attempt (exist %d)", ex[0])
	}
}

func TestAllowedUIDAndGIDAreServed(t *testing.T) {
	for _, allowed := range []ipc.Admission{{UIDs: []uint32{nobody}}, {GIDs: []uint32{nobody}}} {
		srv, addr := daemonAllowing(t, allowed)
		key, owner := putSecret(t, addr)
		got := asUser(t, nobody, nobody, addr, key)
		if got != `served: read "the owner's bytes"; remove_all 1 <nil>` {
			t.Fatalf("uid %d, allowed by %+v, was %s", nobody, allowed, got)
		}
		if srv.Refused() != 0 {
			t.Fatalf("%d connections refused", srv.Refused())
		}
		if ex := owner.BatchExist([]string{key}); ex[0] == 1 {
			t.Fatal("the allowed user's remove_all did not run")
		}
	}
}

func TestAdmission(t *testing.T) {
	me := uint32(os.Geteuid())
	other := me + 1000
	cases := []struct {
		a    ipc.Admission
		p    ipc.Peer
		want bool
	}{
		{ipc.Admission{}, ipc.Peer{UID: me, GID: 12345}, true},
		{ipc.Admission{}, ipc.Peer{UID: other, GID: other}, false},
		{ipc.Admission{UIDs: []uint32{other}}, ipc.Peer{UID: other, GID: other}, true},
		{ipc.Admission{GIDs: []uint32{77}}, ipc.Peer{UID: other, GID: 77}, true},
		{ipc.Admission{GIDs: []uint32{77}}, ipc.Peer{UID: other, GID: other, Groups: []uint32{5, 77}}, true},
		{ipc.Admission{GIDs: []uint32{77}}, ipc.Peer{UID: other, GID: other, Groups: []uint32{5}}, false},
		{ipc.Admission{UIDs: []uint32{other + 1}}, ipc.Peer{UID: other, GID: other}, false},
	}
	if me != 0 {
		// Root is no exception when the daemon is not root.
		cases = append(cases, struct {
			a    ipc.Admission
			p    ipc.Peer
			want bool
		}{ipc.Admission{}, ipc.Peer{UID: 0, GID: 0}, false})
	}
	for _, c := range cases {
		if got := c.a.Admits(c.p); got != c.want {
			t.Errorf("%+v admits %+v: %v, want %v", c.a, c.p, got, c.want)
		}
	}
}

// daemonAllowing is daemon with an allow-list.
func daemonAllowing(t *testing.T, allowed ipc.Admission) (*Server, string) {
	t.Helper()
	return daemonWith(t, ServerConfig{Allowed: allowed})
}
