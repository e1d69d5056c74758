package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/internal/testutil"
)

// beatOf is a heartbeat of runner as its writer takes it.
func beatOf(runner uuid.UUID, version string) store.Heartbeat {
	return store.Heartbeat{RunnerID: runner, AgentVersion: version, Health: json.RawMessage(`[]`),
		ReportedCapacity: store.ReportedCapacity{Capacity: []byte(`{}`), GPUs: []byte(`[]`), Cores: 8, MemoryMiB: 65536}}
}

// submitted submits b to w in the background once the heartbeats before
// it are queued, and waits until it is.
func submitted(t *testing.T, w *fleet.Writer, b store.Heartbeat) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	before := w.Queued()
	go func() {
		_, err := w.Submit(context.Background(), b)
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return w.Queued() == before+1 }, "queued")
	return done
}

func answered(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat was not answered")
		return nil
	}
}

// Heartbeats queued while the writer is busy go in its next batch, at most
// MaxBatch of them a statement; within a batch the newest report of a
// runner wins. Each is answered once its batch committed.
func TestTheWriterBatches(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	other := newYard(t, nil)
	var sizes []float64
	w := fleet.NewWriter(y.st, slog.New(slog.DiscardHandler), fleet.WriterOptions{MaxBatch: 3,
		BatchSize: prometheus.ObserverFunc(func(v float64) { sizes = append(sizes, v) })})
	var pending []<-chan error
	for _, b := range []store.Heartbeat{beatOf(y.runner, "1.0.0"), beatOf(other.runner, "2.0.0"), beatOf(y.runner, "1.1.0"), beatOf(other.runner, "2.1.0")} {
		pending = append(pending, submitted(t, w, b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); w.Run(ctx) }()
	for _, done := range pending {
		require.NoError(t, answered(t, done))
	}
	cancel()
	<-stopped
	require.Equal(t, []float64{2, 1}, sizes, "three heartbeats of two runners, then the fourth")
	require.Equal(t, "1.1.0", y.read(t).AgentVersion, "the newest of the batch")
	require.Equal(t, "2.1.0", other.read(t).AgentVersion)
}

// One bad report fails alone: the batch is written again row by row. A
// runner no longer approved is not recorded.
func TestABadHeartbeatFailsAlone(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	other := newYard(t, nil)
	w := fleet.NewWriter(y.st, slog.New(slog.DiscardHandler), fleet.WriterOptions{})
	bad := beatOf(other.runner, "9.9.9")
	bad.Health = json.RawMessage(`{"not": "a list"`)
	good, broken, unknown := submitted(t, w, beatOf(y.runner, "1.2.0")), submitted(t, w, bad), submitted(t, w, beatOf(uuid.New(), "1.2.0"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	require.NoError(t, answered(t, good))
	err := answered(t, broken)
	require.Error(t, err)
	require.NotErrorIs(t, err, fleet.ErrNotRecorded, "the store's refusal, not a runner unknown")
	require.ErrorIs(t, answered(t, unknown), fleet.ErrNotRecorded)
	require.Equal(t, "1.2.0", y.read(t).AgentVersion)

	// Alone in its batch, it fails as itself.
	_, err = w.Submit(context.Background(), bad)
	require.Error(t, err)
}

// A writer that lingers waits for more heartbeats before it writes; one
// that does not writes what it has at once. Submit gives up with its
// context.
func TestTheWriterLingers(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	other := newYard(t, nil)
	var sizes []float64
	w := fleet.NewWriter(y.st, slog.New(slog.DiscardHandler), fleet.WriterOptions{Linger: 500 * time.Millisecond,
		BatchSize: prometheus.ObserverFunc(func(v float64) { sizes = append(sizes, v) })})
	require.Equal(t, 1000, w.MaxBatch(), "the default bound")
	first := submitted(t, w, beatOf(y.runner, "1.0.0"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	testutil.Eventually(t, 10*time.Second, func() bool { return w.Queued() == 0 }, "the writer took the first")
	_, err := w.Submit(context.Background(), beatOf(other.runner, "1.0.0"))
	require.NoError(t, err)
	require.NoError(t, answered(t, first))
	require.Equal(t, []float64{2}, sizes, "the second came while the writer lingered: one batch")

	// A batch full at its first heartbeat does not linger.
	var one []float64
	full := fleet.NewWriter(y.st, slog.New(slog.DiscardHandler), fleet.WriterOptions{MaxBatch: 1, Linger: 500 * time.Millisecond,
		BatchSize: prometheus.ObserverFunc(func(v float64) { one = append(one, v) })})
	firstOfTwo := submitted(t, full, beatOf(y.runner, "1.0.1"))
	secondOfTwo := submitted(t, full, beatOf(other.runner, "1.0.1"))
	go full.Run(ctx)
	require.NoError(t, answered(t, firstOfTwo))
	require.NoError(t, answered(t, secondOfTwo))
	require.Equal(t, []float64{1, 1}, one)

	gone, stop := context.WithCancel(context.Background())
	stop()
	_, err = fleet.NewWriter(y.st, slog.New(slog.DiscardHandler), fleet.WriterOptions{MaxBatch: 1}).Submit(gone, beatOf(y.runner, "1.0.0"))
	require.True(t, errors.Is(err, context.Canceled))
}
