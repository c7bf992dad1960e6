package testutil

import (
	"bytes"
	"os"
	"sync"
	"testing"
)

// RunTestsOrMain is a TestMain body for command packages: when envVar is
// "1" the test binary runs the program's main instead of the tests, so tests
// can start the real program (exit codes, signals) by re-executing
// os.Args[0] with envVar=1, without a go build.
func RunTestsOrMain(m *testing.M, envVar string, main func()) {
	if os.Getenv(envVar) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// SyncBuffer collects output written from other goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
