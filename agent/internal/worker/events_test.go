package worker

import (
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

// A running job's unit is read when podman says its container died, not
// only every Recheck: with an hour between reads, the result still comes
// at once. Another lease's event, or another attempt's, wakes nothing.
func TestAContainerDeathIsReadAtOnce(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	rt.events = make(chan runtime.ContainerEvent, 4)
	const id = "cccccccc-0000-4000-8000-000000000001"
	p := runOne(t, rt, api, id, func(w *Worker) { w.Recheck = time.Hour })
	// The first read, at the start, finds it running.
	eventually(t, "the first read", func() bool { return rt.readsOf(p.Unit) > 0 })
	rt.end(p.Unit, 4)
	rt.events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: "someone-else", Attempt: 1}
	rt.events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: id, Attempt: 2}
	time.Sleep(200 * time.Millisecond)
	if _, ok := api.result(id); ok {
		t.Fatal("an event of another lease or attempt woke the job")
	}
	code := 4
	rt.events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: id, Attempt: 1, ExitCode: &code}
	eventually(t, "the result after the container died", func() bool {
		r, ok := api.result(id)
		return ok && r.ExitCode != nil && *r.ExitCode == 4
	})
}

// After the death, the unit may not have ended yet (podman cleans up
// before systemd sees conmon go): it is read again, often, until it has.
func TestTheUnitIsReadAgainUntilItEnded(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	rt.events = make(chan runtime.ContainerEvent, 1)
	const id = "cccccccc-0000-4000-8000-000000000002"
	p := runOne(t, rt, api, id, func(w *Worker) { w.Recheck = time.Hour })
	eventually(t, "the first read", func() bool { return rt.readsOf(p.Unit) > 0 })
	rt.events <- runtime.ContainerEvent{Event: runtime.EventDied, Container: p.Container, LeaseID: id, Attempt: 1}
	eventually(t, "reads after the event", func() bool { return rt.readsOf(p.Unit) > 3 })
	rt.end(p.Unit, 0)
	eventually(t, "the result once the unit ended", func() bool {
		_, ok := api.result(id)
		return ok
	})
}
