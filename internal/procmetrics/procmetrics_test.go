package procmetrics

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// value returns the sample of a gauge in Prometheus text, or -1.
func value(text, name string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

func TestGaugesFollowTheProcess(t *testing.T) {
	before := Read()
	if before.Goroutines < 1 || before.Threads < 1 || before.OpenFDs < 0 || before.ResidentBytes <= 0 {
		t.Fatalf("reading %+v: every gauge should be known on Linux", before)
	}
	// Ten more descriptors and goroutines must show in the next reading.
	var files []*os.File
	stop := make(chan struct{})
	for i := 0; i < 10; i++ {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		go func() { <-stop }()
	}
	text := Text()
	close(stop)
	for _, f := range files {
		f.Close()
	}
	if got := value(text, "process_open_fds"); got < int64(before.OpenFDs+10) {
		t.Errorf("process_open_fds %d after opening 10 more than %d\n%s", got, before.OpenFDs, text)
	}
	if got := value(text, "go_goroutines"); got < int64(before.Goroutines+10) {
		t.Errorf("go_goroutines %d after starting 10 more than %d\n%s", got, before.Goroutines, text)
	}
	for _, name := range []string{"go_threads", "process_resident_memory_bytes"} {
		if value(text, name) <= 0 {
			t.Errorf("%s missing or zero in\n%s", name, text)
		}
	}
}

func TestUnknownGaugesAreLeftOut(t *testing.T) {
	var b strings.Builder
	Gauges{Goroutines: 3, Threads: -1, OpenFDs: -1, ResidentBytes: -1}.Write(&b)
	if got := b.String(); !strings.Contains(got, "go_goroutines 3\n") || strings.Contains(got, "process_open_fds") {
		t.Fatalf("want only go_goroutines, got\n%s", got)
	}
}
