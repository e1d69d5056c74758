package health_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/internal/health"
)

func TestConditionsStartUnhealthyAndListInRegistrationOrder(t *testing.T) {
	t.Parallel()
	r := health.NewRegistry()
	r.Register("listeners", "listeners serving", health.Error)
	r.Register("database", "database reachable", health.Error)
	r.Register("ca_expiring", "CA not near expiry", health.Warning)

	var names []string
	for _, c := range r.Conditions() {
		names = append(names, c.Name)
		require.False(t, c.OK, c.Name)
		require.Equal(t, health.NotChecked, c.Text)
	}
	require.Equal(t, []string{"listeners", "database", "ca_expiring"}, names)
	require.False(t, r.Healthy(), "nothing checked is not healthy")
}

func TestOnlyErrorSeverityMakesTheProcessUnhealthy(t *testing.T) {
	t.Parallel()
	r := health.NewRegistry()
	db := r.Register("database", "database reachable", health.Error)
	ca := r.Register("ca_expiring", "CA not near expiry", health.Warning)
	info := r.Register("gpus", "GPUs seen", health.Info)
	db.SetHealthy("")
	ca.SetUnhealthy("intermediate expires in 12 days")
	info.SetUnhealthy("no NVML")
	require.True(t, r.Healthy())
	require.NoError(t, r.Err())
	require.Equal(t, "degraded: ca_expiring: intermediate expires in 12 days; gpus: no NVML", r.Summary())

	db.SetErr(errors.New("ping database: connection refused"), "")
	require.False(t, r.Healthy())
	require.EqualError(t, r.Err(), "unhealthy: database: ping database: connection refused")
	require.Equal(t, "unhealthy: database: ping database: connection refused; ca_expiring: intermediate expires in 12 days; gpus: no NVML", r.Summary())

	db.SetErr(nil, "answers")
	ca.SetHealthy("")
	info.SetHealthy("8 GPUs")
	require.Equal(t, "healthy (3 conditions)", r.Summary())
	got := r.Conditions()[0]
	require.Equal(t, health.Status{Name: "database", Title: "database reachable", Severity: health.Error, OK: true, Text: "answers", Since: got.Since}, got)
}

func TestTextsStayOnOneLine(t *testing.T) {
	t.Parallel()
	r := health.NewRegistry()
	c := r.Register("runtime", "jobs can run", health.Error)
	c.SetUnhealthy("podman:\n  exit status 125\r\n\tno such file ")
	require.Equal(t, "podman: exit status 125 no such file", r.Conditions()[0].Text)

	c.SetUnhealthy(strings.Repeat("é", 300))
	s := r.Summary()
	require.Less(t, len(s), 300, "a long text is clipped in the summary")
	require.True(t, strings.HasSuffix(s, "é…"), "clipped on a rune boundary: %q", s[len(s)-8:])
}

func TestRegisteringTwiceIsAProgrammingError(t *testing.T) {
	t.Parallel()
	r := health.NewRegistry()
	r.Register("database", "database reachable", health.Error)
	require.Panics(t, func() { r.Register("database", "again", health.Info) })
	require.Panics(t, func() { r.Register("", "nameless", health.Info) })
}

func TestWatchWakesOnChangesOnly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := health.NewRegistry()
		db := r.Register("database", "database reachable", health.Error)
		start := time.Now()
		db.SetHealthy("answers")

		conds, changed := r.Watch()
		require.True(t, conds[0].OK)
		time.Sleep(time.Minute)
		db.SetHealthy("answers")
		select {
		case <-changed:
			t.Fatal("setting the same state is no change")
		default:
		}
		require.Equal(t, start, r.Conditions()[0].Since, "since is when it last changed")

		db.SetUnhealthy("connection refused")
		select {
		case <-changed:
		default:
			t.Fatal("a change closes the channel")
		}
		require.Equal(t, start.Add(time.Minute), r.Conditions()[0].Since)
	})
}

func TestFollowReportsEachNewSummary(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := health.NewRegistry()
		db := r.Register("database", "database reachable", health.Error)
		ctx, cancel := context.WithCancel(t.Context())
		var got []string
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.Follow(ctx, func(s string) { got = append(got, s) })
		}()
		synctest.Wait()
		db.SetHealthy("answers")
		synctest.Wait()
		db.SetHealthy("still answers") // the summary does not show it
		synctest.Wait()
		db.SetUnhealthy("connection refused")
		synctest.Wait()
		cancel()
		<-done
		require.Equal(t, []string{
			"unhealthy: database: not checked yet",
			"healthy (1 condition)",
			"unhealthy: database: connection refused",
		}, got)
	})
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	r := health.NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		c := r.Register(fmt.Sprintf("c%d", i), "a condition", health.Severity(i%3))
		wg.Go(func() {
			for j := range 100 {
				c.Set(j%2 == 0, fmt.Sprint(j))
				_ = r.Summary()
				_, _ = r.Watch()
			}
		})
	}
	wg.Wait()
	require.Len(t, r.Conditions(), 8)
	require.False(t, r.Healthy(), "every condition ended unhealthy, some of them errors")
}
