package transfer

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer/shm"
)

// peerProcessEnv makes the test binary run peerProcess instead of the
// tests: an engine with a managed buffer in another process, which prints
// its segment name and waits to be killed.
const peerProcessEnv = "MOONCAKE_TEST_TRANSFER_PEER"

func TestMain(m *testing.M) { testutil.RunTestsOrMain(m, peerProcessEnv, peerProcess) }

func peerProcess() {
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if _, err := e.AllocateManagedBuffer(1 << 16); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(e.Name())
	select {}
}

// startPeerProcess starts this test binary as a peer process (its engine
// serving a segment, peerProcessEnv) and returns it and its segment name;
// it is killed when the test ends.
func startPeerProcess(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), peerProcessEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error:") {
		t.Fatalf("peer process: %q, %v", line, err)
	}
	return cmd, strings.TrimSpace(line)
}

// TestPeerExitedSeesADeadProcess: a same-host peer's death is known at once
// (pidfd), without a probe or a timeout.
func TestPeerExitedSeesADeadProcess(t *testing.T) {
	cmd, segment := startPeerProcess(t)
	e := newTestEngine(t, false)
	h, err := e.CachedSegment(segment)
	if err != nil {
		t.Fatal(err)
	}
	// Reach it once so the shared-memory route is attached.
	if _, err := e.WakeWord(h, 0); err != nil {
		t.Fatal(err)
	}
	if e.PeerExited(h) {
		t.Fatal("a running peer reported exited")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !e.PeerExited(h) {
		if time.Now().After(deadline) {
			t.Fatal("a killed peer not reported exited")
		}
		time.Sleep(time.Millisecond)
	}
	// The access path trusts an old poll for shm.AliveRecheck at most: after
	// that, reaching the dead peer fails.
	time.Sleep(2 * shm.AliveRecheck)
	if _, err := e.WakeWord(h, 0); err == nil {
		t.Fatal("a direct access to a dead peer succeeded")
	}
	local := newTestEngine(t, false)
	self, err := local.CachedSegment(local.Name())
	if err == nil && local.PeerExited(self) {
		t.Fatal("the engine's own segment reported exited")
	}
}

// TestPeerExitedLooksNow: PeerExited does not answer from the poll the
// access path trusts for shm.AliveRecheck: a peer reported running a
// moment ago and killed since is reported exited at the first look.
func TestPeerExitedLooksNow(t *testing.T) {
	cmd, segment := startPeerProcess(t)
	e := newTestEngine(t, false)
	h, err := e.CachedSegment(segment)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		// Reach it, so that the access path has just found it running.
		if _, err := e.WakeWord(h, 0); err != nil {
			t.Fatal(err)
		}
		if e.PeerExited(h) {
			t.Fatal("a running peer reported exited")
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !e.PeerExited(h) {
		t.Fatal("a peer killed and reaped was reported running")
	}
	if err := e.Probe(segment); err == nil {
		t.Fatal("a probe of a dead peer succeeded")
	}
}
