package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/runnerapi"
)

// TestPoolImagesComeBeforeWork: no work is asked for until every image
// the pool lists was tried; the states go in the heartbeat; an image that
// could not be had, or not at its pinned digest, is named as unavailable in
// every request for work (jobs naming it go to other runners).
func TestPoolImagesComeBeforeWork(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	pin := "sha256:" + strings.Repeat("b", 64)
	sys.Images = map[string]string{
		"registry.example/private:1": "unauthorized: authentication required",
		"localhost/tools:2":          "sha256:" + strings.Repeat("c", 64),
	}
	w := newWorker(t, sys, api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := w.Recover(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	select {
	case <-api.asked:
		t.Fatal("asked for work before any heartbeat answer named the pool's images")
	case <-time.After(100 * time.Millisecond):
	}
	list := []string{"localhost/busybox:latest", "registry.example/private:1", "localhost/tools:2@" + pin}
	w.Answer(runnerapi.HeartbeatResponse{PoolImages: list, RecoveryRecorded: true}, w.Recovery())

	var req runnerapi.LeaseRequest
	select {
	case req = <-api.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("no work asked for once the images were tried")
	}
	want := []string{"registry.example/private:1", "localhost/tools:2", "localhost/tools:2@" + pin}
	if strings.Join(req.UnavailableImages, " ") != strings.Join(want, " ") {
		t.Errorf("unavailable %v, want %v", req.UnavailableImages, want)
	}
	states := map[string]runnerapi.ImageState{}
	for _, st := range w.ImageStates() {
		states[st.Image] = st
	}
	if st := states["localhost/busybox:latest"]; st.State != runnerapi.ImagePulled || st.Digest != "sha256:0123" {
		t.Errorf("busybox: %+v", st)
	}
	if st := states["registry.example/private:1"]; st.State != runnerapi.ImageFailed || !strings.Contains(st.Error, "unauthorized") {
		t.Errorf("private: %+v", st)
	}
	if st := states["localhost/tools:2@"+pin]; st.State != runnerapi.ImageMismatch || !strings.Contains(st.Error, "the pool pins "+pin) {
		t.Errorf("pinned: %+v", st)
	}

	// Dropped from the list, an image is neither reported nor held against jobs.
	w.PoolImages(list[:1])
	if got := w.unavailableImages(); len(got) != 0 {
		t.Errorf("unavailable after the list shrank: %v", got)
	}
	if got := w.ImageStates(); len(got) != 1 {
		t.Errorf("states after the list shrank: %+v", got)
	}
}

// While a pool image is pulled, the heartbeat carries the pull's last
// progress line (GraphQL's RunnerImage.progress); once pulled, none.
func TestAPullsProgressIsReported(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	sys.Progress = map[string]string{"registry.example/big:1": "Trying to pull registry.example/big:1...\nCopying blob sha256:abc\n"}
	sys.Release = make(chan struct{})
	w := newWorker(t, sys, api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// As Run does: the worker is set up (PoolImages inits it) before the keeper starts.
	w.PoolImages([]string{"registry.example/big:1"})
	go w.keepImages(ctx)
	state := func() runnerapi.ImageState { return w.ImageStates()[0] }
	eventually(t, "the progress while pulling", func() bool {
		st := state()
		return st.State == runnerapi.ImagePulling && st.Progress == "Copying blob sha256:abc"
	})
	close(sys.Release)
	eventually(t, "pulled", func() bool { return state().State == runnerapi.ImagePulled })
	if st := state(); st.Progress != "" {
		t.Errorf("progress once pulled: %+v", st)
	}
}
