package doctor

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/mooncake-go/mooncake/backend"
	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/envvars"
)

// checkCoordinator says where a process group's coordinator will run
// (MC_PG_COORDINATOR, backend/coordinator_process.go): in a
// mooncake_pg_coordinator process rank 0 starts (the command must be
// installed beside the library, which is beside this command in the wheel
// and the CMake build), inside rank 0 (a warning: rank 0's death is then
// not survived), or at an operator's address (dialled).
func checkCoordinator(cfg Config, env environ) Result {
	const check = "pg coordinator"
	bin := cfg.CoordinatorBin
	if bin == "" {
		bin = besideThisCommand(backend.CoordinatorCommand)
	}
	installed := isExecutable(bin)
	place, err := backend.PlaceCoordinator(env[envvars.PGCoordinator.Name], installed)
	switch {
	case err != nil:
		return problem(check, Failure, troubleshoot.PGCoordinatorUnreachable, err.Error())
	case place.Addr != "":
		c, err := net.DialTimeout("tcp", place.Addr, cfg.Timeout)
		if err != nil {
			return problem(check, Failure, troubleshoot.PGCoordinatorUnreachable,
				fmt.Sprintf("MC_PG_COORDINATOR=%s: %v", place.Addr, err))
		}
		c.Close()
		return ok(check, "ranks use the mooncake_pg_coordinator at "+place.Addr+" (accepts connections)")
	case place.Process:
		return ok(check, "rank 0 starts "+bin+" in a process of its own: any rank's death, rank 0's included, is survived")
	}
	why := "MC_PG_COORDINATOR=inprocess"
	if !installed {
		why = backend.CoordinatorCommand + " is not installed beside this command (" + bin + ")"
	}
	return problem(check, Warning, troubleshoot.PGCoordinatorInRank0,
		"the coordinator would run inside rank 0 ("+why+"): rank 0's death would not be survived")
}

// besideThisCommand is the path of command name in this executable's
// directory, "" if that cannot be told.
func besideThisCommand(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), name)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
