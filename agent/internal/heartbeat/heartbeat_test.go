package heartbeat

import (
	"context"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/capacity"
)

// The watchdog's question: beats attempted within three intervals and a
// minute of the last (the interval the server asked for, else First).
func TestAliveWhileBeatsAreAttempted(t *testing.T) {
	l := &Loop{First: 10 * time.Second}
	if err := l.Alive(context.Background()); err != nil {
		t.Fatalf("before the first beat: %v", err)
	}
	for _, c := range []struct {
		ago, every time.Duration
		alive      bool
	}{
		{time.Second, 0, true},
		{89 * time.Second, 0, true}, // First: 3 × 10 s + 1 min
		{91 * time.Second, 0, false},
		{5 * time.Minute, 2 * time.Minute, true}, // the server asked for 2 min
		{8 * time.Minute, 2 * time.Minute, false},
	} {
		l.last.Store(time.Now().Add(-c.ago).UnixNano())
		l.every.Store(int64(c.every))
		if err := l.Alive(context.Background()); (err == nil) != c.alive {
			t.Errorf("last beat %v ago, interval %v: %v, want alive %v", c.ago, c.every, err, c.alive)
		}
	}
}

// A beat attempted, even one that fails, is what keeps the agent alive for
// the watchdog.
func TestABeatAttemptedKeepsTheAgentAlive(t *testing.T) {
	l := &Loop{First: 10 * time.Second, Collector: &capacity.Collector{Host: capacity.HostProbe{Root: t.TempDir()}}}
	l.last.Store(time.Now().Add(-10 * time.Minute).UnixNano())
	if err := l.Alive(context.Background()); err == nil {
		t.Fatal("alive with the last beat 10 minutes ago")
	}
	if err := l.Once(context.Background()); err == nil {
		t.Fatal("a beat measured a host that is not there")
	}
	if err := l.Alive(context.Background()); err != nil {
		t.Fatalf("after a beat attempted now: %v", err)
	}
}
