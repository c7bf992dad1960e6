package doctor

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/envvars"
)

// ourProcesses are the command names (as /proc/PID/comm shows them, at
// most 15 bytes) of the binaries that legitimately hold Mooncake's ports.
var ourProcesses = []string{"mooncake_master", "mooncake_http_m", "etcd"}

// checkPorts checks the ports a mooncake_master on this host binds are
// free or held by Mooncake's own processes, and that the ranges engines
// and store clients pick their ports from have free ports left.
func checkPorts(cfg Config, env environ, m masterFacts) []Result {
	listening := listeningPorts(cfg.ProcPath)
	masterPort := 0
	if m.addr != "" && isLocal(m.addr) {
		_, p, _ := net.SplitHostPort(m.addr)
		masterPort, _ = strconv.Atoi(p)
	}
	var out []Result
	for _, p := range []struct {
		port int
		what string
		flag string
	}{
		{cfg.RPCPort, "master RPC", "--rpc_port"},
		{cfg.MetricsPort, "master admin", "--metrics_port"},
		{cfg.HTTPMetadataPort, "HTTP metadata", "--http_metadata_server_port"},
	} {
		if p.port <= 0 {
			continue
		}
		check := fmt.Sprintf("port.%d", p.port)
		err := tryBind(p.port)
		if err == nil {
			out = append(out, ok(check, fmt.Sprintf("%s port %d is free", p.what, p.port)))
			continue
		}
		owner := portOwner(cfg.ProcPath, listening[p.port])
		ours := false
		for _, name := range ourProcesses {
			ours = ours || strings.HasPrefix(owner, name+" ")
		}
		if ours || masterPort != 0 && (p.port == masterPort || p.port == cfg.MetricsPort && m.admin != "") {
			out = append(out, ok(check, fmt.Sprintf("%s port %d is held by the running Mooncake service %s", p.what, p.port, owner)))
			continue
		}
		if owner == "" {
			owner = "another process"
		}
		r := problem(check, Failure, troubleshoot.PortInUse, fmt.Sprintf("%s port %d is taken by %s (%v)", p.what, p.port, owner, err))
		r.Fix = fmt.Sprintf("stop %s, or start mooncake_master with %s=<free port> (and pass the same to the doctor)", owner, p.flag)
		out = append(out, r)
	}
	out = append(out, portRange("port.engine_rpc", "Transfer Engine handshake", env, envvars.MinRPCPort, envvars.MaxRPCPort, 15000, 17000, listening))
	out = append(out, portRange("port.store_client", "store client", env, envvars.StoreClientMinPort, envvars.StoreClientMaxPort, 12300, 14300, listening))
	return out
}

func portRange(check, what string, env environ, loV, hiV *envvars.Var, loDef, hiDef int, listening map[int]string) Result {
	lo, _ := strconv.Atoi(env.value(loV, strconv.Itoa(loDef)))
	hi, _ := strconv.Atoi(env.value(hiV, strconv.Itoa(hiDef)))
	if hi < lo {
		return finding(check, Failure, fmt.Sprintf("%s port range: %s=%d is above %s=%d, so only port %d is tried", what, loV.Name, lo, hiV.Name, hi, lo),
			fmt.Sprintf("set %s <= %s", loV.Name, hiV.Name))
	}
	used := 0
	for p := lo; p <= hi; p++ {
		if _, taken := listening[p]; taken {
			used++
		}
	}
	total := hi - lo + 1
	msg := fmt.Sprintf("%s ports %d-%d: %d of %d free", what, lo, hi, total-used, total)
	if used == total {
		return problem(check, Failure, troubleshoot.PortInUse, msg)
	}
	return ok(check, msg)
}

// tryBind binds the port on every address, as mooncake_master's default
// 0.0.0.0 does, and releases it.
func tryBind(port int) error {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	return ln.Close()
}

// isLocal reports whether addr's host is an address of this machine.
func isLocal(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	ifAddrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range ifAddrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// listeningPorts maps each TCP port in the LISTEN state to its socket
// inode, from /proc/net/tcp and tcp6.
func listeningPorts(proc string) map[int]string {
	out := map[int]string{}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(proc, "net", name))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" { // 0A: TCP_LISTEN
				continue
			}
			_, hexPort, found := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); found && err == nil {
				out[int(p)] = fs[9]
			}
		}
		f.Close()
	}
	return out
}

// portOwner finds the process holding the socket inode: "comm (pid N)",
// or "" when it cannot be seen (another user's process, without root).
func portOwner(proc, inode string) string {
	if inode == "" {
		return ""
	}
	target := "socket:[" + inode + "]"
	pids, _ := filepath.Glob(filepath.Join(proc, "[0-9]*"))
	for _, dir := range pids {
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && link == target {
				comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
				return fmt.Sprintf("%s (pid %s)", strings.TrimSpace(string(comm)), filepath.Base(dir))
			}
		}
	}
	return ""
}
