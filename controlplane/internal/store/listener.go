package store

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channels the server listens on.
const (
	// ChannelRunnerStatus carries a runner id whenever the runner changes
	// (status, inventory, controls), or PoolChanged and a pool id when the
	// pool's settings do.
	ChannelRunnerStatus = "runmesh_runner_status"
	// ChannelRevocations carries a serial whenever one is revoked.
	ChannelRevocations = "runmesh_revocations"
	// ChannelJobs carries a pool id whenever the pool may have new work.
	ChannelJobs = "runmesh_jobs"
	// ChannelJobChanges carries job ids, comma-separated, whenever those
	// jobs have a new event or new output (see JobChanged).
	ChannelJobChanges = "runmesh_job_changes"
	// ChannelAdminTokens carries a token id whenever the token is revoked:
	// every replica closes the websockets it authenticated.
	ChannelAdminTokens = "runmesh_admin_tokens"
)

// PoolChanged prefixes a pool id on ChannelRunnerStatus: the settings of
// the pool, which runners are read with, changed.
const PoolChanged = "pool:"

// Listener holds one connection LISTENing for the whole process and fans
// notifications out to subscribers, so a thousand long-polls cost one
// connection, not a thousand.
type Listener struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu   sync.Mutex // guards subs
	subs map[string]map[*Subscription]struct{}

	ready chan struct{}
	done  chan struct{}
}

// Subscription receives the payloads of one channel. An empty payload means
// "something may have been missed" (after a reconnect): re-read the state.
type Subscription struct {
	C       <-chan string
	c       chan string
	l       *Listener
	channel string
}

// NewListener listens through a connection taken from pool.
func NewListener(pool *pgxpool.Pool, log *slog.Logger) *Listener {
	return &Listener{
		pool: pool, log: log.With("component", "listener"),
		subs: map[string]map[*Subscription]struct{}{}, ready: make(chan struct{}), done: make(chan struct{}),
	}
}

// Subscribe starts delivering channel's notifications. Close it when done.
// Subscribe before reading the state you wait on, or a change between the
// read and the subscription is lost.
func (l *Listener) Subscribe(channel string) *Subscription {
	c := make(chan string, 16)
	s := &Subscription{C: c, c: c, l: l, channel: channel}
	l.mu.Lock()
	if l.subs[channel] == nil {
		l.subs[channel] = map[*Subscription]struct{}{}
	}
	l.subs[channel][s] = struct{}{}
	l.mu.Unlock()
	return s
}

// Close stops delivery.
func (s *Subscription) Close() {
	s.l.mu.Lock()
	delete(s.l.subs[s.channel], s)
	s.l.mu.Unlock()
}

// Ready is closed once the first LISTEN is in place.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Run listens until ctx ends, reconnecting after failures.
func (l *Listener) Run(ctx context.Context) {
	defer close(l.done)
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := l.listen(ctx, func() {
			if first {
				close(l.ready)
				first = false
			} else {
				// Notifications sent while we were away are lost: tell
				// everyone to look again.
				l.broadcastAll("")
			}
			backoff = 100 * time.Millisecond
		})
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("listen connection lost; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Listener) listen(ctx context.Context, onListening func()) error {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: it is ours for as long as it lives.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{ChannelRunnerStatus, ChannelRevocations, ChannelJobs, ChannelJobChanges, ChannelAdminTokens} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	onListening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.broadcast(n.Channel, n.Payload)
	}
}

func (l *Listener) broadcast(channel, payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[channel] {
		select {
		case s.c <- payload:
		default:
			// A slow subscriber: whatever it has not read yet gives way to
			// "", so that it re-reads everything rather than miss this.
			// broadcast holds mu, so no other sender races for the slot.
			select {
			case <-s.c:
			default:
			}
			select {
			case s.c <- "":
			default:
			}
		}
	}
}

func (l *Listener) broadcastAll(payload string) {
	l.mu.Lock()
	channels := make([]string, 0, len(l.subs))
	for ch := range l.subs {
		channels = append(channels, ch)
	}
	l.mu.Unlock()
	for _, ch := range channels {
		l.broadcast(ch, payload)
	}
}

// JobChanged reports whether a ChannelJobChanges payload names the job.
func JobChanged(payload, jobID string) bool {
	for payload != "" {
		var id string
		id, payload, _ = strings.Cut(payload, ",")
		if id == jobID {
			return true
		}
	}
	return false
}
