package testutil

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the child if the test process dies
// without running its cleanups (a test timeout panics past t.Cleanup).
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
