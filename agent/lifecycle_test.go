package agent

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/heartbeat"
	"github.com/runmesh/runmesh/runnerapi"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		events []string
		want   []phase
	}{
		"a stop before READY ends the agent at once": {
			[]string{"stop"}, []phase{stopped}},
		"once ready, a stop drains and a second ends it": {
			[]string{"ready", "stop", "stop"}, []phase{serving, draining, stopped}},
		"a drain ends once the worker is drained": {
			[]string{"ready", "stop", "drained"}, []phase{serving, draining, stopped}},
		"an idle worker never told to drain serves on": {
			[]string{"ready", "drained", "drained"}, []phase{serving, serving, serving}},
		"nothing but a stop ends a start": {
			[]string{"drained", "ready"}, []phase{starting, serving}},
		"stopped is the end": {
			[]string{"stop", "ready", "drained", "stop"}, []phase{stopped, stopped, stopped, stopped}},
	} {
		var l lifecycle
		for i, e := range c.events {
			var got phase
			switch e {
			case "ready":
				got = l.ready()
			case "stop":
				got = l.stop()
			case "drained":
				got = l.drained()
			}
			require.Equal(t, c.want[i], got, "%s: after %v", name, c.events[:i+1])
		}
	}
}

// server stands in for the control plane's answers to heartbeats: the
// first refused fail, and the proof counts as recorded from the
// recordAt-th answered beat on.
type server struct {
	refused, recordAt int
	beats, answered   int
}

func (s *server) beat(context.Context) error {
	s.beats++
	if s.beats <= s.refused {
		return errors.New("connection refused")
	}
	s.answered++
	return nil
}

func (s *server) recorded() bool { return s.recordAt > 0 && s.answered >= s.recordAt }

// survivorCheck passes (proves the runner isolated) on its n-th run.
type survivorCheck struct{ runs, passOn int }

func (c *survivorCheck) run(context.Context) bool {
	c.runs++
	return c.runs >= c.passOn
}

func TestReadyGateWaitsForTheSurvivorCheckAndTheRecordedProof(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &server{refused: 1, recordAt: 3}
		check := &survivorCheck{passOn: 3}
		g := readyGate{check: check.run, checkEvery: 15 * time.Second, beat: srv.beat, recorded: srv.recorded, beatEvery: time.Second}
		start := time.Now()
		require.True(t, g.wait(t.Context()))
		require.Equal(t, 3, check.runs)
		// Answered beats do not open it: only the recorded proof does.
		require.Equal(t, 4, srv.beats, "one refused, three answered")
		require.Equal(t, 30*time.Second+3*time.Second, time.Since(start))
	})
}

func TestReadyGateWithoutARuntimeOpensOnAnAnsweredBeat(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &server{refused: 2} // and no proof, ever: there is none to give
		g := readyGate{beat: srv.beat, recorded: srv.recorded, beatEvery: time.Second}
		start := time.Now()
		require.True(t, g.wait(t.Context()))
		require.Equal(t, 3, srv.beats)
		require.Equal(t, 2*time.Second, time.Since(start))
	})
}

func TestReadyGateOpensWhenTheHeartbeatLoopCarriedTheProof(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &server{recordAt: 1, answered: 1} // the loop's own beat got it there
		check := &survivorCheck{passOn: 1}
		g := readyGate{check: check.run, checkEvery: 15 * time.Second, beat: srv.beat, recorded: srv.recorded, beatEvery: time.Second}
		require.True(t, g.wait(t.Context()))
		require.Equal(t, 0, srv.beats)
	})
}

func TestReadyGateStaysShutWhenTheCheckNeverPasses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &server{recordAt: 1}
		check := &survivorCheck{passOn: 1 << 30}
		g := readyGate{check: check.run, checkEvery: 15 * time.Second, beat: srv.beat, recorded: srv.recorded, beatEvery: time.Second}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
		defer cancel()
		start := time.Now()
		require.False(t, g.wait(ctx))
		require.Equal(t, 50*time.Second, time.Since(start), "it returns as soon as ctx ends")
		require.Equal(t, 4, check.runs, "at 0, 15, 30 and 45 s")
		require.Equal(t, 0, srv.beats, "no proof is asked for before the check passed")
	})
}

func TestLastBeatKeepsTheNewest(t *testing.T) {
	t.Parallel()
	l := newLastBeat()
	for _, s := range []int{1, 2, 3} {
		l.put(heartbeat.Beat{Response: runnerapi.HeartbeatResponse{NextHeartbeatSeconds: s}})
	}
	require.Equal(t, 3, (<-l.c).Response.NextHeartbeatSeconds)
	select {
	case b := <-l.c:
		t.Fatalf("a stale beat was kept: %+v", b)
	default:
	}
}
