// Package sdnotify tells systemd how a daemon is doing: READY=1 once it
// serves, STOPPING=1 on the way out, STATUS= with a one-line health summary,
// and WATCHDOG=1 while it is healthy. Outside systemd every call is a no-op.
package sdnotify

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready says start-up is complete, with a status line.
func Ready(status string) { notify(daemon.SdNotifyReady, "STATUS="+status) }

// Stopping says shutdown has begun.
func Stopping() { notify(daemon.SdNotifyStopping) }

// Status replaces the status line.
func Status(status string) { notify("STATUS=" + status) }

// ExtendTimeout asks systemd for d more before it gives up on a start (or
// stop) still under way: for a start that waits on something else, such as
// its database.
func ExtendTimeout(d time.Duration) { notify(fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", d.Microseconds())) }

func notify(states ...string) {
	for _, s := range states {
		_, _ = daemon.SdNotify(false, s)
	}
}

// Watchdog pings systemd's watchdog at half its interval for as long as
// healthy says so, until ctx ends. A process that stops being healthy stops
// pinging, and systemd restarts it. Without WatchdogSec it returns at once.
func Watchdog(ctx context.Context, healthy func(context.Context) error) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hctx, cancel := context.WithTimeout(ctx, interval/4)
			err := healthy(hctx)
			cancel()
			if err == nil {
				notify(daemon.SdNotifyWatchdog)
			}
		}
	}
}
