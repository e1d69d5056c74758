package maintenance

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A service's pass runs at once, then at every tick of its interval, and
// never again once stopped.
func TestALoopRunsAtOnceThenAtItsPace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var passes atomic.Int32
		l := loop{name: "test", interval: time.Minute}
		require.NoError(t, l.start(t.Context(), func(context.Context) { passes.Add(1) }))
		synctest.Wait()
		require.EqualValues(t, 1, passes.Load(), "at once")
		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		require.EqualValues(t, 1, passes.Load(), "not before the interval")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.EqualValues(t, 2, passes.Load(), "at the interval")
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		require.EqualValues(t, 12, passes.Load())
		l.stop()
		time.Sleep(time.Hour)
		synctest.Wait()
		require.EqualValues(t, 12, passes.Load(), "none after Stop")
	})
}

// Stop waits for a pass in flight, which sees its context end.
func TestStopWaitsForAPassInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var finished atomic.Bool
		l := loop{name: "test", interval: time.Minute}
		require.NoError(t, l.start(t.Context(), func(ctx context.Context) {
			<-ctx.Done()
			time.Sleep(time.Second) // winding down
			finished.Store(true)
		}))
		synctest.Wait()
		l.stop()
		require.True(t, finished.Load())
	})
}

// A service runs once at a time: a second Start is refused until Stop,
// and then it starts afresh. Its context ending ends it too.
func TestALoopStartsOnceAtATime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var passes atomic.Int32
		pass := func(context.Context) { passes.Add(1) }
		l := loop{name: "test", interval: time.Minute}
		l.stop() // never started: nothing to end
		ctx, cancel := context.WithCancel(t.Context())
		require.NoError(t, l.start(ctx, pass))
		require.ErrorIs(t, l.start(ctx, pass), errStarted)
		synctest.Wait()
		cancel()
		time.Sleep(time.Hour)
		synctest.Wait()
		require.EqualValues(t, 1, passes.Load(), "ended with its context")
		l.stop()
		require.NoError(t, l.start(t.Context(), pass), "started again after Stop")
		synctest.Wait()
		require.EqualValues(t, 2, passes.Load())
		l.stop()
		l.stop()
	})
}

func TestALoopNeedsAnInterval(t *testing.T) {
	t.Parallel()
	l := loop{name: "test"}
	require.ErrorContains(t, l.start(t.Context(), func(context.Context) {}), "interval")
}
