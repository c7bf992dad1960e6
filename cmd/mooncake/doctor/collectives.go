package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"golang.org/x/sys/unix"
)

// checkCollectivesPath says which path same-host all_gather (two ranks,
// blocks from 4 MiB) and all_to_all (with MC_PG_ALLTOALL_ALGO=cma) take:
// reading the peers' buffers with process_vm_readv (CMA, backend/cma.go),
// or copying through the group's shared buffers. It
// looks at MC_PG_CMA, the Yama ptrace scope and a probe read of this
// process's parent: ranks started side by side by one launcher are not
// each other's descendants, so a kernel that refuses the parent refuses
// them too. Falling back is not a fault, so the verdict is always ok.
func checkCollectivesPath(cfg Config, env environ) Result {
	const check = "collectives"
	copying := "same-host all_gather/all_to_all copy through the group's shared buffers"
	if env.value(envvars.PGCMA, "1") == "0" {
		return ok(check, copying+" (MC_PG_CMA=0)")
	}
	scope := readTrim(filepath.Join(cfg.ProcPath, "sys/kernel/yama/ptrace_scope"))
	yama := "no Yama"
	if scope != "" {
		yama = "kernel.yama.ptrace_scope=" + scope
	}
	if scope == "3" {
		return ok(check, copying+" ("+yama+" forbids reading another process)")
	}
	if err := probeRead(cfg.ProcPath, os.Getppid()); err != nil {
		return ok(check, fmt.Sprintf("%s (%s; process_vm_readv of a process that is not a descendant: %v; ptrace_scope 0 or CAP_SYS_PTRACE allows it)", copying, yama, err))
	}
	return ok(check, "same-host all_gather of two ranks (blocks from 4 MiB), and all_to_all under MC_PG_ALLTOALL_ALGO=cma, read peers' buffers with process_vm_readv (CMA, single copy; "+yama+"; MC_PG_CMA=0 turns it off)")
}

// probeRead reads one byte of the first readable mapping of process pid.
func probeRead(proc string, pid int) error {
	f, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "maps"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text()) // "start-end perms ..."
		if len(fields) < 2 || !strings.HasPrefix(fields[1], "r") {
			continue
		}
		start, _, _ := strings.Cut(fields[0], "-")
		addr, err := strconv.ParseUint(start, 16, 64)
		if err != nil {
			continue
		}
		var b [1]byte
		local := []unix.Iovec{{Base: &b[0]}}
		local[0].SetLen(1)
		_, err = unix.ProcessVMReadv(pid, local, []unix.RemoteIovec{{Base: uintptr(addr), Len: 1}}, 0)
		return err
	}
	return fmt.Errorf("no readable mapping in %s", f.Name())
}
