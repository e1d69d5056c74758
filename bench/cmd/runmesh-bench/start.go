package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/agent/standalone"
)

// benchStart measures, as the runmesh user inside agent/sandbox, how long
// the agent takes from holding a lease to its container running (a
// transient unit started over D-Bus, returning once conmon says READY),
// against a plain `podman run -d` of the same image and command. Both are
// measured alternately, so that drift of the machine hits both alike.
func benchStart(ctx context.Context, rounds int, podman, image string, out io.Writer) error {
	starter, err := standalone.Open(ctx, podman, filepath.Join(os.Getenv("HOME"), "bench-logs"))
	if err != nil {
		return err
	}
	defer starter.Close()

	var ours, plain []time.Duration
	for i := range rounds + 1 { // the first round warms caches and is not counted
		id := uuid.NewString()
		job := standalone.Job{ID: id, Image: image, Command: []string{"sleep", "60"}, Cores: 1, WallClockSeconds: 600}
		start := time.Now()
		started, err := starter.Start(ctx, job)
		if err != nil {
			return err
		}
		took := time.Since(start)
		if err := started.Remove(ctx); err != nil {
			return err
		}

		name := "runmesh-bench-plain-" + id[:8]
		start = time.Now()
		// The same flags that bear on start-up time, without the unit.
		logPath := filepath.Join(starter.LogDir(), name+".log")
		if b, err := exec.CommandContext(ctx, podman, "run", "-d", "--rm", "--init", "--network=none", "--name", name,
			"--log-driver=k8s-file", "--log-opt", "path="+logPath, image, "sleep", "60").CombinedOutput(); err != nil {
			return fmt.Errorf("podman run: %v: %s", err, b)
		}
		tookPlain := time.Since(start)
		if b, err := exec.CommandContext(ctx, podman, "rm", "-f", "-t", "0", name).CombinedOutput(); err != nil {
			return fmt.Errorf("podman rm: %v: %s", err, b)
		}
		os.Remove(logPath)
		if i > 0 {
			ours, plain = append(ours, took), append(plain, tookPlain)
		}
	}
	slices.Sort(ours)
	slices.Sort(plain)
	fmt.Fprintf(out, "runmesh-bench start — %s; rootless podman (cgroup %s) in a systemd user manager, %s\n", machine(), starter.CgroupVersion(), image)
	fmt.Fprintf(out, "lease held → container running (transient unit, podman run --sdnotify=conmon), n=%d: p50 %v  p99 %v\n",
		len(ours), pct(ours, 50).Round(time.Millisecond), pct(ours, 99).Round(time.Millisecond))
	fmt.Fprintf(out, "plain podman run -d, same image and command,                        n=%d: p50 %v  p99 %v\n",
		len(plain), pct(plain, 50).Round(time.Millisecond), pct(plain, 99).Round(time.Millisecond))
	ratio := float64(pct(ours, 50)) / float64(pct(plain, 50))
	fmt.Fprintf(out, "ratio (p50): %.2f (goal ≤ 1.2: %s)\n", ratio, verdict(ratio <= 1.2))
	return nil
}
