package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// master is one mooncake_master process.
type master struct {
	cmd   *exec.Cmd
	addr  string // its RPC address
	admin string // its admin HTTP address
	dir   string
}

// startMaster starts bin on loopback ports of its own with the flags
// args and waits until its RPC port accepts connections.
func startMaster(bin string, args ...string) (*master, error) {
	dir, err := os.MkdirTemp("", "master_clients")
	if err != nil {
		return nil, err
	}
	rpc, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "master.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, append([]string{"--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", rpc),
		fmt.Sprintf("--metrics_port=%d", metrics)}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &master{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", rpc), admin: fmt.Sprintf("127.0.0.1:%d", metrics), dir: dir}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", m.addr, time.Second); err == nil {
			c.Close()
			return m, nil
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("the master did not listen on %s within 20 s (log: %s)", m.addr, log.Name())
		}
	}
}

func (m *master) stop() {
	m.cmd.Process.Kill()
	m.cmd.Wait()
	os.RemoveAll(m.dir)
}

// cpuTime is the master's user+system CPU time so far, in nanoseconds.
func (m *master) cpuTime() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 14th and 15th of the line.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", m.cmd.Process.Pid, b)
	}
	const ticks = 100 // USER_HZ on Linux
	return (ut + st) * int64(time.Second) / ticks, nil
}

// cpuRate is the master's CPU time per second of wall time over d.
func (m *master) cpuRate(d time.Duration) (float64, error) {
	cpu0, err := m.cpuTime()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	cpu1, err := m.cpuTime()
	return float64(cpu1-cpu0) / float64(time.Since(start)), err
}

// rssMiB is the master's resident set size.
func (m *master) rssMiB() (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
