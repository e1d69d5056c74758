// Package heartbeat reports the runner to the control plane every
// leaseSeconds/3 (the server says how long that is), with jitter so a fleet
// started together does not beat together. A failed beat is retried sooner.
package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/runmesh/runmesh/agent/internal/capacity"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// Beat is one heartbeat's outcome, for whoever watches the loop.
type Beat struct {
	Capacity runnerapi.Capacity
	// Proof is the recovery proof the beat carried, if any.
	Proof    *runnerapi.RecoveryProof
	Response runnerapi.HeartbeatResponse
	Err      error
}

// Loop sends heartbeats.
type Loop struct {
	Client    *runnerclient.Client
	Collector *capacity.Collector
	RunnerID  string
	Version   string
	Log       *slog.Logger
	// Health, if set, is the agent's registry: each beat carries its
	// conditions.
	Health *health.Registry
	// Beats, NVML and GPUs, if set, are the conditions the loop knows the
	// answer to: whether the control plane answers beats, from each beat;
	// whether NVML measures and whether every GPU is healthy, from each
	// measurement.
	Beats, NVML, GPUs *health.Condition
	// Observe, if set, sees every beat.
	Observe func(Beat)
	// First is the interval before the server has said (10 s: a 30 s lease).
	First time.Duration
	// Leases, if set, lists the leases held, reported with each beat.
	Leases func() []runnerapi.HeldLease
	// Recovery, if set, is the recovery proof to send (nil: none).
	Recovery func() *runnerapi.RecoveryProof
	// Images, if set, is what the runner has of its pool's images.
	Images func() []runnerapi.ImageState

	once    sync.Once
	kick    chan struct{}
	beating sync.Mutex   // one beat at a time
	last    atomic.Int64 // when the last beat was attempted (Unix ns)
	every   atomic.Int64 // the interval the server last asked for
}

// Alive says whether beats are still being attempted: within three
// intervals and a minute of the last (for the systemd watchdog, which then
// restarts a wedged agent; its jobs go on in their units).
func (l *Loop) Alive(context.Context) error {
	every := l.interval()
	last := l.last.Load()
	if last == 0 {
		return nil // not started yet
	}
	if since := time.Since(time.Unix(0, last)); since > 3*every+time.Minute {
		return fmt.Errorf("no heartbeat attempted for %s", since.Round(time.Second))
	}
	return nil
}

// interval is the one the server last asked for (First before it has).
func (l *Loop) interval() time.Duration {
	if every := time.Duration(l.every.Load()); every > 0 {
		return every
	}
	return l.first()
}

func (l *Loop) first() time.Duration {
	if l.First == 0 {
		return 10 * time.Second
	}
	return l.First
}

// Kick asks for a beat now rather than at the next interval.
func (l *Loop) Kick() {
	l.init()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *Loop) init() {
	l.once.Do(func() { l.kick = make(chan struct{}, 1) })
}

// Once sends one beat now (Observe sees it too) and returns its error.
func (l *Loop) Once(ctx context.Context) error { return l.observed(ctx).Err }

// observed sends one beat and shows it to Observe.
func (l *Loop) observed(ctx context.Context) Beat {
	b := l.beat(ctx)
	l.last.Store(time.Now().UnixNano())
	if l.Beats != nil {
		l.Beats.SetErr(b.Err, "answered")
	}
	if s := b.Response.NextHeartbeatSeconds; b.Err == nil && s > 0 {
		l.every.Store(int64(time.Duration(s) * time.Second))
	}
	if l.Observe != nil {
		l.Observe(b)
	}
	return b
}

// Run beats until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	l.init()
	l.last.Store(time.Now().UnixNano())
	failures := 0
	for {
		b := l.observed(ctx) // takes up the interval the server asks for
		next := l.interval()
		if b.Err == nil {
			failures = 0
		} else {
			failures++
			l.Log.Warn("heartbeat failed", "err", b.Err, "failures_in_a_row", failures)
			// Retry sooner than the interval, so a lease survives one lost beat.
			next = min(next, time.Duration(failures)*time.Second)
		}
		jittered := time.Duration(float64(next) * (0.9 + 0.2*rand.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(jittered):
		case <-l.kick:
		}
	}
}

func (l *Loop) beat(ctx context.Context) Beat {
	l.beating.Lock()
	defer l.beating.Unlock()
	c, err := l.Collector.Measure()
	if err != nil {
		return Beat{Err: fmt.Errorf("measure capacity: %w", err)}
	}
	l.measured(c)
	req := runnerapi.HeartbeatRequest{RunnerID: l.RunnerID, AgentVersion: l.Version, Capacity: c}
	if l.Health != nil {
		req.Health = Report(l.Health.Conditions())
	}
	if l.Leases != nil {
		req.Leases = l.Leases()
	}
	if l.Recovery != nil {
		req.Recovery = l.Recovery()
	}
	if l.Images != nil {
		req.Capacity.Images = l.Images()
	}
	ctx, cancel := context.WithTimeout(ctx, beatTimeout(l.interval()))
	defer cancel()
	var resp runnerapi.HeartbeatResponse
	err = l.Client.Do(ctx, http.MethodPost, runnerapi.PathHeartbeat, req, &resp)
	return Beat{Capacity: c, Proof: req.Recovery, Response: resp, Err: err}
}

// beatTimeout is how long one beat may take: an interval (a third of the
// lease), 2 s at the least and 30 s at the most. A beat stuck on a
// connection that died without a word (a partition, a replica's host gone)
// must fail while the lease can still be saved: the retry goes out on a
// fresh connection at once, before two more intervals end the lease.
func beatTimeout(interval time.Duration) time.Duration {
	return min(max(interval, 2*time.Second), 30*time.Second)
}

// measured sets the conditions a measurement answers.
func (l *Loop) measured(c runnerapi.Capacity) {
	if l.NVML != nil {
		switch c.GPUsUnavailable {
		case "":
			l.NVML.SetHealthy(fmt.Sprintf("%d GPUs, driver %s", len(c.GPUs), c.DriverVersion))
		case capacity.NoDriver:
			// A host without the driver is a CPU host: nothing is wrong.
			l.NVML.SetHealthy("no GPUs: " + c.GPUsUnavailable)
		default:
			l.NVML.SetUnhealthy(c.GPUsUnavailable)
		}
	}
	if l.GPUs != nil {
		l.GPUs.Set(gpuHealth(c.GPUs))
	}
}

// gpuHealth is whether every GPU is healthy, naming each one that is not
// and the evidence.
func gpuHealth(gpus []runnerapi.GPU) (bool, string) {
	var bad []string
	for _, g := range gpus {
		if !g.Healthy {
			bad = append(bad, fmt.Sprintf("GPU %d (%s): %s", g.Index, g.UUID, g.Health))
		}
	}
	if len(bad) > 0 {
		return false, strings.Join(bad, "; ")
	}
	if len(gpus) == 0 {
		return true, "no GPUs"
	}
	return true, fmt.Sprintf("%d GPUs healthy", len(gpus))
}

// maxTitle is the runner API's bound on a condition's title.
const maxTitle = 512

// Report is conditions as the runner API carries them: a condition's text
// joins its title ("title: text"), clipped to the API's bound. A title
// holds no control character and no invalid UTF-8, which the control plane
// refuses: texts come from tools (podman's stderr, say), and a refused
// heartbeat would cost the runner its leases.
func Report(conds []health.Status) []runnerapi.Condition {
	out := make([]runnerapi.Condition, 0, len(conds))
	for _, c := range conds {
		title := c.Title
		if c.Text != "" {
			title += ": " + c.Text
		}
		out = append(out, runnerapi.Condition{Name: c.Name, OK: c.OK, Severity: c.Severity.String(), Title: runnerapi.Clip(printable(title), maxTitle)})
	}
	return out
}

// printable replaces invalid UTF-8 and control characters with spaces.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
}
