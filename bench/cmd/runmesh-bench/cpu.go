package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

type cpuUse struct{ server, postgres, self time.Duration }

// cpuPIDs are the processes a CPU sample reads.
type cpuPIDs struct {
	servers, clients []int
	postmaster       int
}

func (a cpuUse) sub(b cpuUse) cpuUse {
	return cpuUse{a.server - b.server, a.postgres - b.postgres, a.self - b.self}
}

// cpuSample reads CPU time so far of the server processes, of the
// postmaster and its children (backends, writers; each in a session of its
// own, so they are found by parent), and of this process and the workers.
func cpuSample(p cpuPIDs) cpuUse {
	var u cpuUse
	for _, pid := range p.servers {
		u.server += procCPU(pid)
	}
	postmasterPID := p.postmaster
	// Backends that ended (River and pgxpool close connections) count
	// through the postmaster, which reaped them.
	u.postgres = procCPU(postmasterPID) + procReapedCPU(postmasterPID)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := procParent(pid); ok && ppid == postmasterPID {
			u.postgres += procCPU(pid)
		}
	}
	u.self = cpuTime()
	for _, pid := range p.clients {
		u.self += procCPU(pid)
	}
	return u
}

// procStat returns the fields of /proc/pid/stat after the command name.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func procParent(pid int) (int, bool) {
	f := procStat(pid)
	if len(f) < 2 {
		return 0, false
	}
	p, err := strconv.Atoi(f[1])
	return p, err == nil
}

// procReapedCPU is the CPU time of pid's children that have ended and
// been waited for (cutime+cstime).
func procReapedCPU(pid int) time.Duration { return procTicks(pid, 13) }

// procCPU is utime+stime.
func procCPU(pid int) time.Duration { return procTicks(pid, 11) }

// procTicks sums two adjacent /proc/pid/stat fields of clock ticks (1/100 s),
// the first at index i after the command name.
func procTicks(pid, i int) time.Duration {
	f := procStat(pid)
	if len(f) < i+2 {
		return 0
	}
	a, _ := strconv.ParseInt(f[i], 10, 64)
	b, _ := strconv.ParseInt(f[i+1], 10, 64)
	return time.Duration(a+b) * 10 * time.Millisecond
}
