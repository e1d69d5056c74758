package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/runnerapi"
)

// The worker's pace when the server does not take what it sends: tested
// in a bubble of testing/synctest, where waiting takes no time.

// gaps are the times between successive moments.
// apart checks that the times are the given seconds apart.
func apart(t *testing.T, what string, at []time.Time, seconds ...time.Duration) {
	t.Helper()
	var got, want []time.Duration
	for i := 1; i < len(at); i++ {
		got = append(got, at[i].Sub(at[i-1]))
	}
	for _, s := range seconds {
		want = append(want, s*time.Second)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s %v apart, want %v", what, got, want)
	}
}

// A result the server fails to take is sent again, one second later, then
// twice as long each time up to half a minute: a server in trouble is not
// hammered, and a result is never given up.
func TestAResultIsSentAgainLessAndLessOften(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sys, api := runtimetest.New(t), newAPI()
		api.failResults = 7
		w := newWorker(t, sys, api)
		w.init()
		const id = "cccccccc-0000-4000-8000-000000000002"
		j := newHeld(w.Runtime.Take(runnerapi.Lease{LeaseID: id, Attempt: 3, Image: "localhost/busybox:latest"}, nil), runnerapi.PhaseRunning)
		w.held[id] = j
		w.finish(t.Context(), j, runtime.GiveBack("the job's unit disappeared", true))
		apart(t, "results sent", api.resultsAt, 1, 2, 4, 8, 16, 30, 30)
		if r, ok := api.result(id); !ok || r.Attempt != 3 || r.RunnerVersion == nil || *r.RunnerVersion != "test" {
			t.Fatalf("result %+v", r)
		}
		if len(w.Held()) != 0 {
			t.Fatal("still held once its result is in")
		}
	})
}

// The survivor check asks the server about the jobs found until it has an
// answer: again one second later, then twice as long each time up to 15 s.
func TestTheSurvivorCheckAsksAgainLessAndLessOften(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, runtimetest.New(t), newAPI())
		w.init()
		var at []time.Time
		beat := func(context.Context) error {
			at = append(at, time.Now())
			if len(at) <= 7 {
				return errors.New("connection refused")
			}
			return nil
		}
		if err := w.askAbout(t.Context(), beat); err != nil {
			t.Fatal(err)
		}
		apart(t, "heartbeats", at, 1, 2, 4, 8, 15, 15, 15)
	})
}

// A request for work that fails is made again (after a second, then less
// and less often): the worker does not stop asking.
func TestARequestForWorkThatFailedIsMadeAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sys, api := runtimetest.New(t), newAPI()
		api.failLeases = 2
		w := newWorker(t, sys, api)
		ready(t, w)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go w.Run(ctx)
		start := time.Now()
		var asked []time.Duration
		for range 3 {
			<-api.asked
			asked = append(asked, time.Since(start))
		}
		if want := []time.Duration{0, time.Second, 3 * time.Second}; fmt.Sprint(asked) != fmt.Sprint(want) {
			t.Fatalf("asked at %v, want %v", asked, want)
		}
		cancel()
		synctest.Wait()
	})
}

// A pool image that could not be had is tried again after a while (a login
// fixed, a registry back); one pulled is not pulled again.
func TestAPoolImageThatFailedIsTriedAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sys, api := runtimetest.New(t), newAPI()
		const private, open = "registry.example/private:1", "localhost/busybox:latest"
		sys.Images = map[string]string{private: "unauthorized: authentication required"}
		w := newWorker(t, sys, api)
		w.PoolImages([]string{open, private})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go w.keepImages(ctx)
		synctest.Wait()
		if sys.Pulls(private) != 1 || sys.Pulls(open) != 1 {
			t.Fatalf("pulls at first: %d, %d", sys.Pulls(private), sys.Pulls(open))
		}
		time.Sleep(imageRetry - time.Minute)
		synctest.Wait()
		if sys.Pulls(private) != 1 {
			t.Fatalf("%d pulls of the failed image before it was due again", sys.Pulls(private))
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if sys.Pulls(private) != 2 || sys.Pulls(open) != 1 {
			t.Fatalf("pulls once the failed image was due again: %d, %d", sys.Pulls(private), sys.Pulls(open))
		}
		cancel()
		synctest.Wait()
	})
}

// The jobs a runner holds are bounded: near the bound it asks for no more
// than the bound leaves, and at the bound for nothing.
func TestARunnerHoldsAtMostMaxJobs(t *testing.T) {
	t.Parallel()
	sys := runtimetest.New(t)
	w := newWorker(t, sys, newAPI())
	w.init()
	hold := func(n int) {
		for i := len(w.held); i < n; i++ {
			id := fmt.Sprintf("ffffffff-0000-4000-8000-%012d", i)
			w.held[id] = newHeld(w.Runtime.Take(runnerapi.Lease{LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest",
				Claim: runnerapi.Resources{Cores: 0.01}}, nil), runnerapi.PhaseRunning)
		}
	}
	hold(MaxJobs - 2)
	if req, room := w.request(); !room || req.Max != 2 {
		t.Fatalf("holding %d: room %v, asking for %d", len(w.held), room, req.Max)
	}
	hold(MaxJobs)
	if req, room := w.request(); room {
		t.Fatalf("holding %d: asking for %d more", len(w.held), req.Max)
	}
}
