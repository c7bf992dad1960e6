// Package nodeid names the node a process runs on, the one notion of "same
// node" that every part of the stack uses: the kernel's boot id together
// with the process's pid namespace. Two processes with the same id run on
// one kernel and see each other's pids, so they can share memory through
// /proc (the TE's shm transport, the backend's CMA reads), and the store's
// prefer_alloc_in_same_node places a write on their segments. Host names
// are not used: containers left at the same default host name are
// different nodes, and one host's network namespaces that share a pid
// namespace are one node.
package nodeid

import (
	"os"
	"strings"
	"sync"
)

// ID returns this process's node id, "<boot id>/<pid namespace>" (for
// example "0b6c…/pid:[4026531836]"); "" when /proc does not say, which
// matches no other node.
var ID = sync.OnceValue(func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
})
