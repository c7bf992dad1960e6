package doctor

import (
	"bufio"
	"io"
	"regexp"
	"strings"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
)

// LogFinding is one log line that shows a known problem or error code.
type LogFinding struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Text string `json:"text"`
	// Problem is the troubleshoot.Problem ID or the error code's name.
	Problem string `json:"problem"`
	Cause   string `json:"cause"`
	Fix     string `json:"fix"`
}

// maxLogLine bounds one log line the scanner reads (longer lines are
// split).
const maxLogLine = 1 << 20

// codePattern finds one error code in log lines: upstream's name as a
// word (NO_AVAILABLE_HANDLE, ERR_METADATA) or our Go errors' "name (code)".
type codePattern struct {
	re   *regexp.Regexp
	info CodeInfo
}

var codePatterns = func() []codePattern {
	var out []codePattern
	for _, c := range AllCodes() {
		if c.Code != 0 {
			out = append(out, codePattern{regexp.MustCompile(`\b` + regexp.QuoteMeta(c.Name) + `\b|` + regexp.QuoteMeta(c.LogText)), c})
		}
	}
	return out
}()

// ScanLog reads a log and returns the lines that show known problems, in
// order; a line that shows several gives one finding for each.
func ScanLog(file string, r io.Reader) ([]LogFinding, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLogLine)
	var out []LogFinding
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		text := strings.TrimSpace(line)
		for _, p := range troubleshoot.Match(line) {
			out = append(out, LogFinding{File: file, Line: n, Text: text, Problem: p.ID, Cause: p.Cause, Fix: p.Fix})
		}
		for _, cp := range codePatterns {
			if cp.re.MatchString(line) {
				out = append(out, LogFinding{File: file, Line: n, Text: text, Problem: cp.info.Name,
					Cause: cp.info.Component + " error " + cp.info.LogText + ": " + cp.info.Meaning, Fix: cp.info.Fix})
			}
		}
	}
	return out, sc.Err()
}
