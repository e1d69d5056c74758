package runtime

import (
	"context"
	"time"
)

// Watch follows podman's events for job containers, once per runtime,
// until ctx ends: a container that died or ran out of memory wakes the job
// that follows it, which reads its unit at once, and often until it ended.
// Between streams (podman's service restarted) events are lost: each job
// reads its unit once when a stream opens again, and every Recheck anyway.
func (r *Runtime) Watch(ctx context.Context) {
	r.init()
	r.watchOnce.Do(func() { go r.watch(ctx) })
}

func (r *Runtime) watch(ctx context.Context) {
	backoff := time.Second
	for again := false; ctx.Err() == nil; again = true {
		if again {
			r.wakeAll()
		}
		start := time.Now()
		err := r.System.ContainerEvents(ctx, r.containerEvent)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		r.Log.Warn("podman's container events", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (r *Runtime) containerEvent(e ContainerEvent) {
	r.mu.Lock()
	j := r.jobs[e.LeaseID]
	if j == nil || j.lease.Attempt != e.Attempt {
		j = nil
	}
	r.mu.Unlock()
	log := r.Log.With("lease_id", e.LeaseID, "attempt", e.Attempt, "container", e.Container)
	switch {
	case e.Event == EventOOM:
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

func (r *Runtime) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		j.wakeUp(false)
	}
}

// wakeUp asks the job's follower to read its unit now and, after its
// container's death, often until the unit ended.
func (j *Job) wakeUp(death bool) {
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
