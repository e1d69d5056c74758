package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

// The calls the agent makes to podman's service, against the sandbox's
// podman (Debian 12's 4.3): image inspect, the container list by label,
// removal, and the events that say a job's container died.
func TestThePodmanAPI(t *testing.T) {
	r := local(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	digest, err := r.EnsureImage(ctx, "localhost/busybox:latest", nil)
	if err != nil || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digest) {
		t.Fatalf("EnsureImage of a local image: %q, %v", digest, err)
	}
	_, err = r.EnsureImage(ctx, "localhost/absent:latest", nil)
	var ie *runtime.ImageError
	if !errors.As(err, &ie) || ie.JobFault {
		t.Fatalf("EnsureImage of an image this host lacks: %v, want the host's fault", err)
	}
	t.Logf("pull of localhost/absent: %v", err)

	var mu sync.Mutex
	var events []runtime.ContainerEvent
	streamed := make(chan error, 1)
	go func() {
		streamed <- r.ContainerEvents(ctx, func(e runtime.ContainerEvent) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		})
	}()
	time.Sleep(500 * time.Millisecond) // the stream is open before the job starts

	// A running job's container is listed by its label.
	sleeper := jobSpec("sleep", "300")
	su, err := r.Start(ctx, sleeper)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Forget(context.Background(), su.Name)
	list, err := r.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *runtime.Container
	for i, c := range list {
		if c.LeaseID == sleeper.LeaseID {
			found = &list[i]
		}
	}
	if found == nil || found.Attempt != 1 || found.State != "running" || found.Name != su.Name[:len(su.Name)-len(".service")] {
		t.Fatalf("the running job's container in %+v: %+v", list, found)
	}

	// A job that exits is said to have died, with its exit code.
	exiter := jobSpec("sh", "-c", "exit 7")
	eu, err := r.Start(ctx, exiter)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Forget(context.Background(), eu.Name)
	died := func(lease string) *runtime.ContainerEvent {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.LeaseID == lease && e.Event == runtime.EventDied {
				return &e
			}
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for died(exiter.LeaseID) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	e := died(exiter.LeaseID)
	if e == nil || e.Attempt != 1 || e.ExitCode == nil || *e.ExitCode != 7 {
		t.Fatalf("died event for the exiting job: %+v (all: %+v)", e, events)
	}

	// Removing the sleeper's container (a survivor no unit follows) ends
	// it; removing it again is no error.
	if err := r.RemoveContainer(ctx, found.Name); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveContainer(ctx, found.Name); err != nil {
		t.Fatalf("a second removal: %v", err)
	}
	if list, _ := r.Containers(ctx); len(list) > 0 {
		for _, c := range list {
			if c.LeaseID == sleeper.LeaseID {
				t.Fatalf("removed container still listed: %+v", c)
			}
		}
	}
	for died(sleeper.LeaseID) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if died(sleeper.LeaseID) == nil {
		t.Fatal("no died event for the removed container")
	}
	cancel()
	if err := <-streamed; err != nil {
		t.Fatalf("the event stream ended with %v, not with its context", err)
	}
}

// A job's data directories: its inputs read-only at /inputs, its outputs
// writable at /outputs (as a job's are made: 0777 inside the runmesh
// user's own directory).
func TestDataDirectoriesAreMounted(t *testing.T) {
	r := local(t)
	ctx := context.Background()
	j := jobSpec("sh", "-c", "cat /inputs/a.txt > /outputs/b.txt && ! touch /inputs/x 2>/dev/null")
	j.Inputs, j.Outputs = true, true
	p := r.Host().Paths(j.LeaseID, j.Attempt)
	defer os.RemoveAll(p.Data)
	if err := os.MkdirAll(p.Inputs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.Outputs, 0o700); err != nil || os.Chmod(p.Outputs, 0o777) != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Inputs, "a.txt"), []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := r.Start(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Forget(context.Background(), u.Name)
	s := waitEnded(t, r, u.Name)
	if s.ExitCode == nil || *s.ExitCode != 0 {
		t.Fatalf("status %+v: the input was not readable, or writable", s)
	}
	if b, err := os.ReadFile(filepath.Join(p.Outputs, "b.txt")); err != nil || string(b) != "data\n" {
		t.Fatalf("the output: %q, %v", b, err)
	}
}
