package fleet

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// Writer coalesces heartbeats: whatever arrives while a batch is being
// written goes into the next one, and each batch is one statement. A
// heartbeat is acknowledged only once its batch committed.
type Writer struct {
	store     *store.Store
	log       *slog.Logger
	maxBatch  int
	linger    time.Duration
	batchSize prometheus.Observer
	in        chan pending
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// MaxBatch bounds one statement (default 1000).
	MaxBatch int
	// Linger is how long the writer waits for more heartbeats once one has
	// arrived while it was idle. Zero writes at once: under load batches
	// form by themselves while the previous one is written.
	Linger time.Duration
	// BatchSize observes the size of each batch, if set.
	BatchSize prometheus.Observer
}

// NewWriter returns a writer; start it with Run.
func NewWriter(s *store.Store, log *slog.Logger, o WriterOptions) *Writer {
	if o.MaxBatch == 0 {
		o.MaxBatch = 1000
	}
	return &Writer{store: s, log: log, maxBatch: o.MaxBatch, linger: o.Linger, batchSize: o.BatchSize, in: make(chan pending, 4*o.MaxBatch)}
}

type pending struct {
	beat store.Heartbeat
	done chan result
}

type result struct {
	outcome store.HeartbeatOutcome
	found   bool
	err     error
}

// ErrNotRecorded: the runner is no longer approved; its heartbeat was
// dropped.
var ErrNotRecorded = errors.New("heartbeat not recorded: the runner is not approved")

// Run writes batches until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	for {
		var batch []pending
		select {
		case <-ctx.Done():
			return
		case p := <-w.in:
			batch = append(batch, p)
		}
		if w.linger > 0 {
			t := time.NewTimer(w.linger)
		linger:
			for len(batch) < w.maxBatch {
				select {
				case p := <-w.in:
					batch = append(batch, p)
				case <-t.C:
					break linger
				}
			}
			t.Stop()
		}
		// Take whatever else is already waiting.
	drain:
		for len(batch) < w.maxBatch {
			select {
			case p := <-w.in:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		w.write(ctx, batch)
	}
}

// Submit queues a heartbeat and waits until it is durable.
func (w *Writer) Submit(ctx context.Context, b store.Heartbeat) (store.HeartbeatOutcome, error) {
	p := pending{beat: b, done: make(chan result, 1)}
	select {
	case w.in <- p:
	case <-ctx.Done():
		return store.HeartbeatOutcome{}, ctx.Err()
	}
	select {
	case r := <-p.done:
		if r.err == nil && !r.found {
			return r.outcome, ErrNotRecorded
		}
		return r.outcome, r.err
	case <-ctx.Done():
		return store.HeartbeatOutcome{}, ctx.Err()
	}
}

func (w *Writer) write(ctx context.Context, batch []pending) {
	// The newest report of a runner wins within a batch.
	latest := make(map[uuid.UUID]int, len(batch))
	beats := make([]store.Heartbeat, 0, len(batch))
	for _, p := range batch {
		if i, ok := latest[p.beat.RunnerID]; ok {
			beats[i] = p.beat
			continue
		}
		latest[p.beat.RunnerID] = len(beats)
		beats = append(beats, p.beat)
	}
	if w.batchSize != nil {
		w.batchSize.Observe(float64(len(beats)))
	}
	out, err := w.store.RecordHeartbeats(ctx, beats, nil)
	errs := map[uuid.UUID]error{}
	if err != nil && len(beats) > 1 {
		// One bad report must not fail its neighbours: write them one by
		// one, and only the bad one fails.
		w.log.Error("record heartbeats; writing the batch row by row", "batch", len(beats), "err", err)
		out, err = map[uuid.UUID]store.HeartbeatOutcome{}, nil
		for _, b := range beats {
			one, err := w.store.RecordHeartbeats(ctx, []store.Heartbeat{b}, nil)
			if err != nil {
				w.log.Error("record heartbeat", "runner_id", b.RunnerID, "err", err)
				errs[b.RunnerID] = err
				continue
			}
			for id, o := range one {
				out[id] = o
			}
		}
	} else if err != nil {
		w.log.Error("record heartbeats", "batch", len(beats), "err", err)
	}
	for _, p := range batch {
		o, found := out[p.beat.RunnerID]
		e := err
		if e == nil {
			e = errs[p.beat.RunnerID]
		}
		p.done <- result{outcome: o, found: found, err: e}
	}
}
