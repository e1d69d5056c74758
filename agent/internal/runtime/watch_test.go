package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
)

// watched is a runtime that reads a running job's unit only when podman
// says its container died (or in an hour), with one job running.
func watched(t *testing.T, id string) (*runtimetest.System, runtime.Paths, <-chan followed) {
	sys := runtimetest.New(t)
	sys.Events = make(chan runtime.ContainerEvent, 4)
	r := newRuntime(t, sys, &fakeConn{})
	r.Recheck = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.Watch(ctx)
	_, done := launch(t, r, lease(id))
	p := sys.Host().Paths(id, 1)
	// The first read, at the start, finds it running.
	eventually(t, "the first read", func() bool { return sys.ReadsOf(p.Unit) > 0 })
	return sys, p, done
}

// A running job's unit is read when podman says its container died, not
// only every Recheck: with an hour between reads, the result still comes
// at once. Another lease's event, or another attempt's, wakes nothing.
func TestAContainerDeathIsReadAtOnce(t *testing.T) {
	t.Parallel()
	const id = "cccccccc-0000-4000-8000-000000000001"
	sys, p, done := watched(t, id)
	sys.End(p.Unit, 4)
	sys.Events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: "someone-else", Attempt: 1}
	sys.Events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: id, Attempt: 2}
	select {
	case f := <-done:
		t.Fatalf("an event of another lease or attempt woke the job: %+v", f)
	case <-time.After(200 * time.Millisecond): // time for a wrong wake to show
	}
	code := 4
	sys.Events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: id, Attempt: 1, ExitCode: &code}
	if f := ended(t, done); f.res.ExitCode == nil || *f.res.ExitCode != 4 {
		t.Fatalf("the result after the container died: %+v", f)
	}
}

// After the death, the unit may not have ended yet (podman cleans up
// before systemd sees conmon go): it is read again, often, until it has.
func TestTheUnitIsReadAgainUntilItEnded(t *testing.T) {
	t.Parallel()
	const id = "cccccccc-0000-4000-8000-000000000002"
	sys, p, done := watched(t, id)
	sys.Events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: id, Attempt: 1}
	eventually(t, "reads after the event", func() bool { return sys.ReadsOf(p.Unit) > 3 })
	sys.End(p.Unit, 0)
	if f := ended(t, done); f.how != runtime.Finished {
		t.Fatalf("followed to %+v once the unit ended", f)
	}
}
