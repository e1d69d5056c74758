package worker

import (
	"context"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

// watchContainers follows podman's events for job containers, once per
// worker, until ctx ends: a container that died or ran out of memory
// wakes the job that follows it, which reads its unit at once, and often
// until it ended. Between streams (podman's service restarted) events are
// lost: each job reads its unit once when a stream opens again, and every
// Recheck anyway.
func (w *Worker) watchContainers(ctx context.Context) {
	w.watchOnce.Do(func() { go w.watch(ctx) })
}

func (w *Worker) watch(ctx context.Context) {
	backoff := time.Second
	for again := false; ctx.Err() == nil; again = true {
		if again {
			w.wakeAll()
		}
		start := time.Now()
		err := w.Runtime.ContainerEvents(ctx, w.containerEvent)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		w.Log.Warn("podman's container events", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (w *Worker) containerEvent(e runtime.ContainerEvent) {
	w.mu.Lock()
	j := w.held[e.LeaseID]
	if j == nil || j.lease.Attempt != e.Attempt {
		j = nil
	}
	w.mu.Unlock()
	log := w.Log.With("lease_id", e.LeaseID, "attempt", e.Attempt, "container", e.Container)
	switch {
	case e.Event == runtime.EventOOM:
		log.Warn("the job's container ran out of memory")
	case e.ExitCode != nil:
		log.Info("the job's container died", "exit_code", *e.ExitCode)
	default:
		log.Info("the job's container died")
	}
	if j != nil {
		j.wakeUp(true)
	}
}

func (w *Worker) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.held {
		j.wakeUp(false)
	}
}

// wakeUp asks the job's follower to read its unit now and, after its
// container's death, often until the unit ended.
func (j *job) wakeUp(death bool) {
	for {
		select {
		case j.wake <- death:
			return
		default:
		}
		// Full: a death outweighs a plain read waiting.
		select {
		case prev := <-j.wake:
			death = death || prev
		default:
		}
	}
}
