package shm

import (
	"fmt"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStatFlagsSkipsTheCommandName: the flags are the ninth field of
// /proc/<pid>/stat, counted after the command name's last ')', which may
// itself hold spaces and parentheses.
func TestStatFlagsSkipsTheCommandName(t *testing.T) {
	for line, want := range map[string]uint64{
		"1234 (python3) R 1 1234 1234 0 -1 4194560 100 0":          4194560,
		"1234 (a b) c) (d) S 1 1234 1234 0 -1 4194308 100 0 0 0 0": 4194308,
		"77 ()) Z 1 77 77 0 -1 4 0 0":                              4,
	} {
		got, ok := statFlags([]byte(line))
		if !ok || got != want {
			t.Errorf("statFlags(%q) = %d, %v; want %d", line, got, ok, want)
		}
	}
	for _, bad := range []string{"", "1234 python3 R 1", "1234 (x) R 1 2 3"} {
		if _, ok := statFlags([]byte(bad)); ok {
			t.Errorf("statFlags(%q) parsed a line without the flags", bad)
		}
	}
}

// TestExitingSeesARunningAndAReapedProcess: a running process (this one)
// is not exiting; a process that exited and was reaped is (its stat file
// can no longer be read).
func TestExitingSeesARunningAndAReapedProcess(t *testing.T) {
	self, err := unix.Open("/proc/self/stat", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(self)
	if exiting(self) {
		t.Error("this running process was reported exiting")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if exiting(fd) {
		t.Error("a running child was reported exiting")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !exiting(fd) {
		t.Error("a killed and reaped child was not reported exiting")
	}
}
