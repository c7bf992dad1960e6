package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
)

// checkMemory compares the memory a store client on this host will take
// (global_segment_size + local_buffer_size) with the locked-memory limit,
// the huge pages reserved, /dev/shm and the memory available.
func checkMemory(cfg Config, env environ, rdma bool) []Result {
	need := cfg.GlobalSegmentSize + cfg.LocalBufferSize
	mi, err := readMeminfo(filepath.Join(cfg.ProcPath, "meminfo"))
	out := []Result{checkMemlock(need, rdma), checkHugepages(mi, env), checkShm(cfg.ShmPath, need)}
	if err != nil {
		return append(out, finding("memory", Warning, fmt.Sprintf("read meminfo: %v", err), "run the doctor on Linux with /proc mounted"))
	}
	return append(out, checkAvailable(mi, need))
}

func checkMemlock(need uint64, rdma bool) Result {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return finding("memlock", Warning, fmt.Sprintf("getrlimit(RLIMIT_MEMLOCK): %v", err), "check ulimit -l")
	}
	cur := "unlimited"
	if lim.Cur != unix.RLIM_INFINITY {
		cur = bytesText(lim.Cur)
	}
	msg := fmt.Sprintf("locked-memory limit %s; segments and buffers %s", cur, bytesText(need))
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur >= need {
		return ok("memlock", msg)
	}
	if !rdma {
		return ok("memlock", msg+" (only RDMA registration locks memory; there are no RDMA devices)")
	}
	return problem("memlock", Failure, troubleshoot.MemoryRegistration, msg+": RDMA registration of the segments will fail")
}

func checkHugepages(mi map[string]uint64, env environ) Result {
	total, free, size := mi["HugePages_Total"], mi["HugePages_Free"], mi["Hugepagesize"]
	msg := fmt.Sprintf("%d huge pages of %s reserved, %d free", total, bytesText(size), free)
	if v := strings.TrimSpace(env["MC_STORE_USE_HUGEPAGE"]); v != "" {
		return finding("hugepages", Warning,
			msg+"; MC_STORE_USE_HUGEPAGE is set, but Mooncake-Go allocates segments with normal pages (memfd), so no huge pages are used",
			"unset MC_STORE_USE_HUGEPAGE; release the reservation (vm.nr_hugepages) if nothing else needs it")
	}
	if total > 0 {
		msg += "; Mooncake-Go does not use them, and reserved pages are not available to its segments"
	}
	return ok("hugepages", msg)
}

func checkShm(path string, need uint64) Result {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return finding("shm", Warning, fmt.Sprintf("%s: %v", path, err), "mount a tmpfs there (mount -t tmpfs -o size=<n> tmpfs /dev/shm)")
	}
	free := st.Bavail * uint64(st.Bsize)
	size := st.Blocks * uint64(st.Bsize)
	msg := fmt.Sprintf("%s: %s free of %s; segments and buffers %s", path, bytesText(free), bytesText(size), bytesText(need))
	if free < need {
		return finding("shm", Warning,
			msg+": too small to hold them. Mooncake-Go's own segments live in memfd, which /dev/shm's size does not bound, but torch.multiprocessing, NCCL and upstream Mooncake processes on this host place shared memory there",
			fmt.Sprintf("enlarge it (mount -o remount,size=%s %s; docker run --shm-size=%s)", bytesText(need*2), path, bytesText(need*2)))
	}
	return ok("shm", msg)
}

func checkAvailable(mi map[string]uint64, need uint64) Result {
	avail, found := mi["MemAvailable"]
	if !found {
		avail = mi["MemFree"]
	}
	msg := fmt.Sprintf("%s of memory available; segments and buffers %s", bytesText(avail), bytesText(need))
	switch {
	case need > avail:
		return finding("memory", Failure, msg+": setup cannot allocate them",
			"lower global_segment_size / local_buffer_size in setup, or free memory on this host")
	case need > avail/10*8:
		return finding("memory", Warning, msg+": more than 80% of what is available",
			"lower global_segment_size, or leave more memory to the rest of the host")
	}
	return ok("memory", msg)
}

// readMeminfo reads /proc/meminfo into bytes (kB fields) and counts.
func readMeminfo(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, rest, found := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(rest)
		if !found || len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fs) > 1 && fs[1] == "kB" {
			n <<= 10
		}
		out[k] = n
	}
	return out, sc.Err()
}

// bytesText writes n in binary units.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
