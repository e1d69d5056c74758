package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/controlplane/store/storetest"
)

// A subscriber that falls behind must not miss a change for good: what
// overflows its buffer turns into "", the signal to re-read everything.
func TestASlowSubscriberIsToldToReadEverything(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := storetest.NewPool(t)
	l := store.NewListener(pool, slog.New(slog.DiscardHandler))
	go l.Run(ctx)
	<-l.Ready()
	sub := l.Subscribe(store.ChannelRunnerStatus)
	defer sub.Close()

	const sent = 40
	for i := range sent {
		_, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", store.ChannelRunnerStatus, fmt.Sprint(i))
		require.NoError(t, err)
	}
	// Read nothing while the listener takes them in: 40 overflow a buffer
	// of 16. Then the last one is there, or has given way to "".
	time.Sleep(2 * time.Second)
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) == 0 || (got[len(got)-1] != "" && got[len(got)-1] != fmt.Sprint(sent-1)) {
		select {
		case p := <-sub.C:
			got = append(got, p)
		case <-deadline:
			t.Fatalf("got %q", got)
		}
	}
	require.Contains(t, got, "", "an overflow must say so: %q", got)
}

func TestJobChangedReadsPackedIDs(t *testing.T) {
	t.Parallel()
	a, b := "01a22cc5-1bf3-7bfb-8db5-7b155b01253f", "01a22cc5-1bf3-7bfb-8db5-7b155b01253e"
	for _, c := range []struct {
		payload string
		want    bool
	}{{a, true}, {b + "," + a, true}, {a + "," + b, true}, {b, false}, {"", false}, {a[:35], false}, {a + "x," + b, false}} {
		if got := store.JobChanged(c.payload, a); got != c.want {
			t.Errorf("JobChanged(%q) = %v", c.payload, got)
		}
	}
}
