// Package procmetrics writes the process's own resource gauges (goroutines,
// threads, open descriptors, resident memory) in the Prometheus text format,
// under the names Prometheus's Go and process collectors use, so that every
// /metrics endpoint of the project reports them the same way and a leak
// soak can read them from outside the process.
package procmetrics

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Gauges are one reading of the process's resources. A field that could
// not be read (no /proc) is -1.
type Gauges struct {
	Goroutines    int
	Threads       int
	OpenFDs       int
	ResidentBytes int64
}

// Read takes the current reading.
func Read() Gauges {
	g := Gauges{Goroutines: runtime.NumGoroutine(), Threads: -1, OpenFDs: -1, ResidentBytes: -1}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		g.OpenFDs = len(fds) - 1 // less the descriptor ReadDir itself had open
	}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			fields := strings.Fields(value)
			if len(fields) == 0 {
				continue
			}
			n, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				continue
			}
			switch name {
			case "Threads":
				g.Threads = int(n)
			case "VmRSS":
				g.ResidentBytes = n << 10 // the kernel reports kB
			}
		}
	}
	return g
}

// Write writes the reading as Prometheus gauges; fields that could not be
// read are left out.
func (g Gauges) Write(w io.Writer) {
	gauge := func(name, help string, v int64) {
		if v >= 0 {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
		}
	}
	gauge("go_goroutines", "goroutines that currently exist", int64(g.Goroutines))
	gauge("go_threads", "OS threads of the process", int64(g.Threads))
	gauge("process_open_fds", "open file descriptors", int64(g.OpenFDs))
	gauge("process_resident_memory_bytes", "resident memory in bytes", g.ResidentBytes)
}

// Text is Read().Write as a string.
func Text() string {
	var b strings.Builder
	Read().Write(&b)
	return b.String()
}
