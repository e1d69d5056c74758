// Package capacity measures what a runner can offer: its GPUs through NVML
// (with health from XID and ECC events), and its cores, memory and disk as
// limited by its cgroup. It never guesses: without NVML it reports no GPUs
// and why.
package capacity

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/runmesh/runmesh/runnerapi"
)

// HostProbe reads host facts below Root: "/" on a real host, a fixture
// directory in tests.
type HostProbe struct {
	Root string
	// WorkDir is where jobs write; its free space is reported.
	WorkDir string
	// NumCPU is the CPUs this process may run on (runtime.NumCPU, which
	// honours the affinity mask and so cpusets).
	NumCPU func() int
}

// Measure reports cores, memory and disk.
func (p HostProbe) Measure() (runnerapi.HostCapacity, error) {
	var h runnerapi.HostCapacity
	if p.Root == "" {
		p.Root = "/"
	}
	if p.NumCPU == nil {
		p.NumCPU = runtime.NumCPU
	}
	h.Hostname, _ = os.Hostname()

	mem, err := p.meminfo()
	if err != nil {
		return h, err
	}
	h.MemoryMiB, h.MemoryAvailableMiB = mem["MemTotal"]/1024, mem["MemAvailable"]/1024

	h.Cores = float64(p.NumCPU())
	lim, err := p.cgroupLimits()
	if err != nil {
		return h, err
	}
	if lim.cores > 0 && lim.cores < h.Cores {
		h.Cores = lim.cores
		h.Limited = append(h.Limited, "cpu")
	}
	if lim.memoryBytes > 0 && lim.memoryBytes/(1<<20) < h.MemoryMiB {
		h.MemoryMiB = lim.memoryBytes / (1 << 20)
		h.MemoryAvailableMiB = min(h.MemoryAvailableMiB, h.MemoryMiB)
		h.Limited = append(h.Limited, "memory")
	}

	if p.WorkDir != "" {
		var st syscall.Statfs_t
		if err := syscall.Statfs(p.WorkDir, &st); err != nil {
			return h, fmt.Errorf("free disk under %s: %w", p.WorkDir, err)
		}
		h.DiskFreeMiB = int64(st.Bavail) * st.Bsize / (1 << 20)
	}
	return h, nil
}

// meminfo is /proc/meminfo in kB.
func (p HostProbe) meminfo() (map[string]int64, error) {
	f, err := os.Open(filepath.Join(p.Root, "proc/meminfo"))
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err == nil {
			out[k] = n
		}
	}
	if out["MemTotal"] == 0 {
		return nil, errors.New("memory: no MemTotal in /proc/meminfo")
	}
	if _, ok := out["MemAvailable"]; !ok {
		out["MemAvailable"] = out["MemFree"]
	}
	return out, sc.Err()
}

type limits struct {
	cores       float64 // 0: none
	memoryBytes int64   // 0: none
}

// cgroupLimits finds the tightest CPU quota and memory limit on this
// process's cgroup and its ancestors (a parent's limit binds its children),
// under cgroup v2 or v1.
func (p HostProbe) cgroupLimits() (limits, error) {
	var lim limits
	b, err := os.ReadFile(filepath.Join(p.Root, "proc/self/cgroup"))
	if errors.Is(err, os.ErrNotExist) {
		return lim, nil
	}
	if err != nil {
		return lim, fmt.Errorf("cgroup: %w", err)
	}
	fsRoot := filepath.Join(p.Root, "sys/fs/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, path := parts[1], parts[2]
		switch {
		case parts[0] == "0" && controllers == "":
			// cgroup v2: one unified hierarchy.
			p.walk(fsRoot, path, func(dir string) {
				lim.tighten(cpuMaxV2(dir), memoryMaxV2(dir))
			})
		case hasController(controllers, "cpu"):
			dir := filepath.Join(fsRoot, controllers)
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(fsRoot, "cpu")
			}
			p.walk(dir, path, func(d string) { lim.tighten(cpuQuotaV1(d), 0) })
		case hasController(controllers, "memory"):
			p.walk(filepath.Join(fsRoot, "memory"), path, func(d string) { lim.tighten(0, memoryLimitV1(d)) })
		}
	}
	return lim, nil
}

func (l *limits) tighten(cores float64, mem int64) {
	if cores > 0 && (l.cores == 0 || cores < l.cores) {
		l.cores = cores
	}
	if mem > 0 && (l.memoryBytes == 0 || mem < l.memoryBytes) {
		l.memoryBytes = mem
	}
}

// walk calls f for the cgroup directory of path and each ancestor up to
// the hierarchy's root.
func (p HostProbe) walk(root, path string, f func(dir string)) {
	for {
		f(filepath.Join(root, path))
		if path == "/" || path == "" || path == "." {
			return
		}
		path = filepath.Dir(path)
	}
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cpuMaxV2 reads "QUOTA PERIOD" or "max PERIOD".
func cpuMaxV2(dir string) float64 {
	f := strings.Fields(readTrim(filepath.Join(dir, "cpu.max")))
	if len(f) != 2 || f[0] == "max" {
		return 0
	}
	q, err1 := strconv.ParseFloat(f[0], 64)
	per, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || per <= 0 {
		return 0
	}
	return q / per
}

func memoryMaxV2(dir string) int64 {
	v := readTrim(filepath.Join(dir, "memory.max"))
	if v == "" || v == "max" {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func cpuQuotaV1(dir string) float64 {
	q, err1 := strconv.ParseFloat(readTrim(filepath.Join(dir, "cpu.cfs_quota_us")), 64)
	per, err2 := strconv.ParseFloat(readTrim(filepath.Join(dir, "cpu.cfs_period_us")), 64)
	if err1 != nil || err2 != nil || q <= 0 || per <= 0 {
		return 0
	}
	return q / per
}

// memoryLimitV1 reads memory.limit_in_bytes; "unlimited" is a huge number
// near the page-rounded maximum of int64.
func memoryLimitV1(dir string) int64 {
	n, err := strconv.ParseInt(readTrim(filepath.Join(dir, "memory.limit_in_bytes")), 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0
	}
	return n
}
