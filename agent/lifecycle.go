package agent

import (
	"context"
	"sync"
	"time"

	"github.com/runmesh/runmesh/agent/internal/heartbeat"
)

// phase is where the daemon is in its life.
type phase int

const (
	// starting: the survivor check and the READY gate. A stop ends the
	// agent at once: it has taken no work, and whatever it found running
	// the next start finds again.
	starting phase = iota
	// serving: READY=1 went out and work is taken. A stop drains.
	serving
	// draining: no more work; the jobs held are heartbeated and reported
	// to their end. Another stop ends the agent at once: the jobs go on in
	// their units, and the next start adopts them.
	draining
	// stopped: Run returns.
	stopped
)

// lifecycle moves the daemon through its phases. Each method is one event
// and returns the phase it leads to; an event a phase does not expect
// changes nothing.
type lifecycle struct{ phase phase }

// ready: the gate opened.
func (l *lifecycle) ready() phase {
	if l.phase == starting {
		l.phase = serving
	}
	return l.phase
}

// stop: a signal asked the agent to stop.
func (l *lifecycle) stop() phase {
	if l.phase == serving {
		l.phase = draining
	} else {
		l.phase = stopped
	}
	return l.phase
}

// drained: the worker holds no job and asks for none. Only a drain ends
// the agent this way; an idle worker that was never told to drain serves on.
func (l *lifecycle) drained() phase {
	if l.phase == draining {
		l.phase = stopped
	}
	return l.phase
}

// readyGate holds READY=1, and with it all work, back until the control
// plane has this start's recovery proof and the proof says the runner is
// isolated: nothing runs beside a job the agent does not follow. A runner
// without a job runtime takes no work and has nothing to prove; one
// answered heartbeat opens its gate.
type readyGate struct {
	// check is the survivor check, nil without a runtime: true once it
	// proved the runner isolated. It is run again every checkEvery until
	// then.
	check      func(context.Context) bool
	checkEvery time.Duration
	// beat sends a heartbeat now, every beatEvery until the gate opens;
	// recorded says whether the control plane holds the proof.
	beat      func(context.Context) error
	recorded  func() bool
	beatEvery time.Duration
}

// wait returns true once the gate opens, false if ctx ends first.
func (g readyGate) wait(ctx context.Context) bool {
	if g.check != nil && !retry(ctx, g.checkEvery, g.check) {
		return false
	}
	return retry(ctx, g.beatEvery, func(ctx context.Context) bool {
		// The heartbeat loop beats too, and may have carried the proof.
		if g.check != nil && g.recorded() {
			return true
		}
		err := g.beat(ctx)
		return err == nil && (g.check == nil || g.recorded())
	})
}

// retry calls try until it succeeds, every between tries; false if ctx
// ends first.
func retry(ctx context.Context, every time.Duration, try func(context.Context) bool) bool {
	for {
		if try(ctx) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// lastBeat holds the latest heartbeat the daemon has not read yet. A newer
// beat replaces an unread one: the status line READY=1 carries must not
// show a stale beat (the first, say, sent before the survivor check).
type lastBeat struct {
	mu sync.Mutex // makes a put's replace-then-send one step
	c  chan heartbeat.Beat
}

func newLastBeat() *lastBeat { return &lastBeat{c: make(chan heartbeat.Beat, 1)} }

func (l *lastBeat) put(b heartbeat.Beat) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.c:
	default:
	}
	l.c <- b
}
