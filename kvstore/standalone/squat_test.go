package standalone

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// envSquatSocket names the socket the squatter child binds.
const envSquatSocket = "MC_TEST_SQUAT_SOCKET"

// TestSquatterChild is another user's process that binds a daemon's
// socket name before the daemon (run by squat): it takes one connection,
// reads until it gets a byte or a descriptor or the connection ends, and
// prints what it received.
func TestSquatterChild(t *testing.T) {
	name := os.Getenv(envSquatSocket)
	if name == "" {
		t.Skip("runs only as the child of the socket squatting tests")
	}
	ln, err := ipc.Listen(name)
	if err != nil {
		fmt.Printf("SQUAT-RESULT: listen: %v\n", err)
		return
	}
	defer ln.Close()
	fmt.Println("SQUAT-LISTENING")
	uc, err := ln.AcceptUnix()
	if err != nil {
		fmt.Printf("SQUAT-RESULT: accept: %v\n", err)
		return
	}
	defer uc.Close()
	f, err := uc.File()
	if err != nil {
		fmt.Printf("SQUAT-RESULT: file: %v\n", err)
		return
	}
	defer f.Close()
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(64*4))
	var n, fds int
	for n == 0 && fds == 0 {
		m, oobn, _, _, err := unix.Recvmsg(int(f.Fd()), buf, oob, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || m == 0 && oobn == 0 {
			break // the dummy closed its end
		}
		n += m
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, msg := range msgs {
			rights, _ := unix.ParseUnixRights(&msg)
			fds += len(rights)
		}
	}
	fmt.Printf("SQUAT-RESULT: bytes=%d fds=%d\n", n, fds)
}

// squat runs TestSquatterChild as uid/gid bound to socket, runs connect
// once it listens, and returns what the child received and connect's error.
func squat(t *testing.T, uid, gid uint32, socket string, connect func() error) (string, error) {
	t.Helper()
	cmd := testAsUser(t, uid, gid, "TestSquatterChild", envSquatSocket+"="+socket)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill() // nothing when it has exited
		cmd.Wait()
	}()
	lines := bufio.NewScanner(out)
	var seen []string
	next := func() string {
		for lines.Scan() {
			line := lines.Text()
			seen = append(seen, line)
			if strings.HasPrefix(line, "SQUAT-") {
				return line
			}
		}
		t.Fatalf("the squatter as uid %d ended without a result:\n%s", uid, strings.Join(seen, "\n"))
		return ""
	}
	if line := next(); line != "SQUAT-LISTENING" {
		t.Fatalf("the squatter: %s", line)
	}
	cerr := connect()
	return strings.TrimPrefix(next(), "SQUAT-RESULT: "), cerr
}

func TestDummyRefusesADaemonOfAnotherUser(t *testing.T) {
	nextPort++
	addr, socket := fmt.Sprintf("127.0.0.1:%d", nextPort), ipc.SocketName(nextPort)
	got, err := squat(t, nobody, nobody, socket, func() error {
		d, err := NewDummy(DummyConfig{ServerAddress: addr, LocalBufferSize: 1 << 20, Scope: "s"})
		if err == nil {
			d.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("held by uid %d", nobody)) {
		t.Fatalf("setup_dummy against a socket held by uid %d: %v", nobody, err)
	}
	if got != "bytes=0 fds=0" {
		t.Fatalf("the dummy sent the squatter something: %s", got)
	}
}

func TestDummyAcceptsTheDaemonUIDItIsTold(t *testing.T) {
	t.Setenv("MC_STORE_DAEMON_UID", fmt.Sprint(nobody))
	nextPort++
	addr, socket := fmt.Sprintf("127.0.0.1:%d", nextPort), ipc.SocketName(nextPort)
	got, err := squat(t, nobody, nobody, socket, func() error {
		d, err := NewDummy(DummyConfig{ServerAddress: addr, LocalBufferSize: 1 << 20, Scope: "s"})
		if err == nil {
			d.Close()
		}
		return err
	})
	// The fake daemon hangs up after the first bytes: the setup fails,
	// but not for the daemon's uid.
	if err == nil || strings.Contains(err.Error(), "held by uid") {
		t.Fatalf("setup_dummy with MC_STORE_DAEMON_UID=%d: %v", nobody, err)
	}
	if !strings.HasPrefix(got, "bytes=") || got == "bytes=0 fds=0" {
		t.Fatalf("the dummy sent the daemon it was told to trust nothing: %s", got)
	}
}

func TestTrustedDaemon(t *testing.T) {
	me := uint32(os.Geteuid())
	t.Setenv("MC_STORE_DAEMON_UID", "")
	if !trustedDaemon(me) || !trustedDaemon(0) || trustedDaemon(me+1000) {
		t.Fatal("without MC_STORE_DAEMON_UID: own uid and root only")
	}
	t.Setenv("MC_STORE_DAEMON_UID", fmt.Sprint(me+1000))
	if !trustedDaemon(me+1000) || trustedDaemon(me+1001) {
		t.Fatal("MC_STORE_DAEMON_UID names one more uid")
	}
	t.Setenv("MC_STORE_DAEMON_UID", "-1")
	if trustedDaemon(^uint32(0)) {
		t.Fatal("an invalid MC_STORE_DAEMON_UID trusts a uid")
	}
}
