//go:build !linux

package testutil

import "os/exec"

// setProcAttr is a no-op where the kernel offers no parent-death signal;
// t.Cleanup still kills the child.
func setProcAttr(*exec.Cmd) {}
