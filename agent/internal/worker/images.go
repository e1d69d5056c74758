package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// poolImages are the images the runner's pool lists, kept on this host:
// each pulled after enrolment and before work that needs it is taken, so
// that a registry login or permission that is missing shows when the host
// is set up, not when a job waits. A job naming one that is not pulled
// (yet, or at all) is not asked for.
type poolImages struct {
	mu     sync.Mutex
	heard  bool     // a heartbeat answer has named the list
	want   []string // as the pool lists them
	states map[string]runnerapi.ImageState
	wake   chan struct{}
}

// imageRetry is how soon an image that could not be had is tried again (a
// login fixed, a registry back).
const imageRetry = 5 * time.Minute

// PoolImages takes the pool's list from a heartbeat answer.
func (w *Worker) PoolImages(list []string) {
	w.init()
	p := &w.images
	p.mu.Lock()
	changed := !p.heard || !slices.Equal(p.want, list)
	p.heard, p.want = true, slices.Clone(list)
	for img := range p.states {
		if !slices.Contains(list, img) {
			delete(p.states, img)
		}
	}
	p.mu.Unlock()
	if !changed {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	// A request for work in flight names the images unavailable as they
	// were: asked again, it names them as they are now.
	w.mu.Lock()
	if w.stopAsking != nil {
		w.stopAsking()
	}
	w.mu.Unlock()
}

// ImageStates is what the next heartbeat reports of the pool's images.
func (w *Worker) ImageStates() []runnerapi.ImageState {
	w.init()
	p := &w.images
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]runnerapi.ImageState, 0, len(p.want))
	for _, img := range p.want {
		if st, ok := p.states[img]; ok {
			out = append(out, st)
		} else {
			out = append(out, runnerapi.ImageState{Image: img, State: runnerapi.ImagePulling, At: time.Now().UTC()})
		}
	}
	return out
}

// imagesTried: the list is known and every image on it was tried once.
func (w *Worker) imagesTried() bool {
	p := &w.images
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.heard {
		return false
	}
	for _, img := range p.want {
		if st, ok := p.states[img]; !ok || st.State == runnerapi.ImagePulling {
			return false
		}
	}
	return true
}

// unavailableImages are the pool's images not pulled as listed, under both
// the names a job may give them (the reference, and the pinned form).
func (w *Worker) unavailableImages() []string {
	p := &w.images
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, img := range p.want {
		if st := p.states[img]; st.State != runnerapi.ImagePulled {
			ref, _, _ := runnerapi.ParsePoolImage(img)
			out = append(out, ref)
			if ref != img {
				out = append(out, img)
			}
		}
	}
	return out
}

// keepImages pulls the pool's images it does not have, and tries again
// those it could not have, until ctx ends.
func (w *Worker) keepImages(ctx context.Context) {
	p := &w.images
	for ctx.Err() == nil {
		next := w.nextImage()
		if next == "" {
			select {
			case <-ctx.Done():
			case <-p.wake:
			case <-time.After(time.Minute):
			}
			continue
		}
		st := w.pullPoolImage(ctx, next)
		p.mu.Lock()
		if slices.Contains(p.want, next) {
			p.states[next] = st
		}
		p.mu.Unlock()
		w.signal()
		w.Kick()
	}
}

// nextImage is a listed image never tried, or one that failed long enough
// ago; "" when there is none.
func (w *Worker) nextImage() string {
	p := &w.images
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, img := range p.want {
		st, ok := p.states[img]
		if !ok || st.State != runnerapi.ImagePulled && time.Since(st.At) > imageRetry {
			return img
		}
	}
	return ""
}

// pullPoolImage makes one pool image local and checks its pin.
func (w *Worker) pullPoolImage(ctx context.Context, img string) runnerapi.ImageState {
	ref, pinned, _ := runnerapi.ParsePoolImage(img)
	start := time.Now()
	w.images.mu.Lock()
	w.images.states[img] = runnerapi.ImageState{Image: img, State: runnerapi.ImagePulling, At: start.UTC()}
	w.images.mu.Unlock()
	log := w.Log.With("image", img)
	digest, err := w.Runtime.EnsureImage(ctx, ref, func(line string) {
		log.Info("pulling pool image", "progress", line)
		w.images.mu.Lock()
		if st := w.images.states[img]; st.State == runnerapi.ImagePulling {
			st.Progress = line
			w.images.states[img] = st
		}
		w.images.mu.Unlock()
	})
	st := runnerapi.ImageState{Image: img, Digest: digest, At: time.Now().UTC()}
	switch {
	case err != nil:
		st.State, st.Error = runnerapi.ImageFailed, runnerapi.Clip(err.Error(), 500)
		w.Log.Warn("pool image not had: jobs naming it wait for another runner", "image", img, "err", err)
	case pinned != "" && digest != pinned:
		st.State = runnerapi.ImageMismatch
		st.Error = fmt.Sprintf("this host has %s as %s; the pool pins %s", ref, digest, pinned)
		w.Log.Warn("pool image refused: not the pinned digest", "image", img, "digest", digest)
	default:
		st.State = runnerapi.ImagePulled
		w.Log.Info("pool image ready", "image", img, "digest", digest, "took", time.Since(start).Round(time.Millisecond))
	}
	return st
}
