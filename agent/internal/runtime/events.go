package runtime

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
)

// A job container's events the agent follows.
const (
	EventDied = "died"
	EventOOM  = "oom"
)

// ContainerEvent is podman's word that a job container died or ran out of
// memory.
type ContainerEvent struct {
	Event     string // EventDied, EventOOM
	Container string
	LeaseID   string
	Attempt   int
	// ExitCode is the container's, when podman gave one with a death.
	ExitCode *int
}

// ContainerEvents streams podman's died and oom events of job containers
// to fn until ctx ends (nil) or the stream does (an error): the caller
// reconnects, and reads the state of what it follows, since events in
// between are not replayed.
func (r *Local) ContainerEvents(ctx context.Context, fn func(ContainerEvent)) error {
	c, err := r.api.with(ctx)
	if err != nil {
		return err
	}
	ch := make(chan types.Event, 16)
	stop := make(chan bool, 1)
	opts := new(system.EventsOptions).WithStream(true).WithFilters(map[string][]string{
		"type": {"container"}, "event": {EventDied, EventOOM},
	})
	if err := system.Events(c, ch, stop, opts); err != nil {
		return err
	}
	defer func() { stop <- true }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("podman's event stream ended")
			}
			if ev, ok := jobEvent(e); ok {
				fn(ev)
			}
		}
	}
}

// jobEvent reads a job container's event; other containers' are not ours.
func jobEvent(e types.Event) (ContainerEvent, bool) {
	a := e.Actor.Attributes
	name := a["name"]
	if !strings.HasPrefix(name, UnitPrefix) || a[LabelLease] == "" {
		return ContainerEvent{}, false
	}
	ev := ContainerEvent{Event: string(e.Action), Container: name, LeaseID: a[LabelLease]}
	ev.Attempt, _ = strconv.Atoi(a[LabelAttempt])
	if s, ok := a["containerExitCode"]; ok && ev.Event == EventDied {
		if code, err := strconv.Atoi(s); err == nil {
			ev.ExitCode = &code
		}
	}
	return ev, true
}
