package consistency

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// roleEnv makes the test binary run as one of the cluster's processes
// instead of the tests: "worker" (workload.go's client) or "storage" (a
// client that only mounts a segment).
const roleEnv = "MOONCAKE_CONSISTENCY_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "worker":
		os.Exit(runWorker())
	case "storage":
		os.Exit(runStorage())
	case "":
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: unknown role\n", roleEnv, os.Getenv(roleEnv))
		os.Exit(2)
	}
	code := m.Run()
	if masterBin != "" {
		os.RemoveAll(filepath.Dir(masterBin))
	}
	os.Exit(code)
}
