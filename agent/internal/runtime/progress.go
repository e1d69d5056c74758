package runtime

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// pullProgress takes a pull's progress as podman streams it and calls
// line with each line, trimmed, at most once per progressEvery unless the
// line says the pull moved to another stage. A line longer than
// maxProgressLine is cut.
type pullProgress struct {
	mu   sync.Mutex
	buf  []byte
	last time.Time
	line func(string)
}

const (
	progressEvery   = time.Second
	maxProgressLine = 300
)

func (p *pullProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			if len(p.buf) > maxProgressLine {
				p.emit(string(p.buf))
				p.buf = p.buf[:0]
			}
			return len(b), nil
		}
		p.emit(string(p.buf[:i]))
		p.buf = p.buf[i+1:]
	}
}

func (p *pullProgress) emit(s string) {
	s = runnerapi.Clip(strings.ToValidUTF8(strings.TrimSpace(s), ""), maxProgressLine)
	if s == "" {
		return
	}
	// Bars redrawn in place would be many lines a second; stages are few.
	if !isStage(s) && time.Since(p.last) < progressEvery {
		return
	}
	p.last = time.Now()
	p.line(s)
}

// isStage: podman's lines that start a step of a pull.
func isStage(s string) bool {
	for _, w := range []string{"Trying to pull", "Getting image source signatures", "Copying blob", "Copying config",
		"Writing manifest", "Storing signatures"} {
		if strings.HasPrefix(s, w) {
			return true
		}
	}
	return false
}

// EnsureImage makes an image local, pulling it when it is not, and returns
// its digest; line is given the pull's progress, a line at a time (at most
// one a second but for a new stage).
func (r *Runtime) EnsureImage(ctx context.Context, image string, line func(string)) (string, error) {
	return r.System.EnsureImage(ctx, image, &pullProgress{line: line})
}
