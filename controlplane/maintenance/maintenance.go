// Package maintenance holds the background services every server replica
// runs for its life, one a duty, each at its own pace: the lease rescuer,
// the blocked check, queue timeouts and the pruners. Policy decides
// (controlplane/queue); the store applies, with statements that lock their
// rows SKIP LOCKED, so replicas share the work instead of doing it twice.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Service is what every maintenance service is: Start launches its loop
// and returns; Stop ends it and waits for a pass in flight.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

var errStarted = errors.New("already started")

// loop runs a service's pass at once, then at every tick of its interval,
// until its context ends or stop. A pass that overruns its interval is
// followed by the next at once, not by a backlog of them.
type loop struct {
	name     string
	interval time.Duration

	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loop) start(ctx context.Context, pass func(context.Context)) error {
	if l.interval <= 0 {
		return fmt.Errorf("start %s: interval %v is not positive", l.name, l.interval)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return fmt.Errorf("start %s: %w", l.name, errStarted)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for ctx.Err() == nil {
			pass(ctx)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	return nil
}

// stop ends the loop and waits for it; a loop never started, or stopped
// already, has nothing to end.
func (l *loop) stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// failed logs a pass's error, unless the service is stopping: an error
// then is the stop itself.
func failed(ctx context.Context, log *slog.Logger, msg string, err error) {
	if ctx.Err() == nil {
		log.Error(msg, "err", err)
	}
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Maintainer starts and stops a replica's services together.
type Maintainer struct {
	services []Service
}

// NewMaintainer groups services.
func NewMaintainer(services ...Service) *Maintainer {
	return &Maintainer{services: services}
}

// Start starts every service; if one fails to start, those started before
// it are stopped again.
func (m *Maintainer) Start(ctx context.Context) error {
	for i, s := range m.services {
		if err := s.Start(ctx); err != nil {
			for _, started := range m.services[:i] {
				started.Stop()
			}
			return fmt.Errorf("start maintenance: %w", err)
		}
	}
	return nil
}

// Stop stops every service at once, so that one in the middle of a long
// pass holds up none of the others, and waits for all of them.
func (m *Maintainer) Stop() {
	var wg sync.WaitGroup
	for _, s := range m.services {
		wg.Go(s.Stop)
	}
	wg.Wait()
}
