package agent

import (
	"crypto/x509"
	"fmt"
	"time"

	"github.com/runmesh/runmesh/agent/internal/heartbeat"
)

// statusLine is the one-line health summary for sd_notify STATUS=.
func statusLine(leaf *x509.Certificate, b heartbeat.Beat, jobs int, draining bool) string {
	state := "online"
	switch {
	case b.Err != nil:
		state = "heartbeat failing: " + b.Err.Error()
	case b.Response.Quarantined:
		state = "online, quarantined"
	case b.Response.Draining:
		state = "online, draining"
	}
	healthy := 0
	for _, g := range b.Capacity.GPUs {
		if g.Healthy {
			healthy++
		}
	}
	gpus := fmt.Sprintf("%d GPUs (%d healthy)", len(b.Capacity.GPUs), healthy)
	if b.Capacity.GPUsUnavailable != "" {
		gpus = "no GPUs: " + b.Capacity.GPUsUnavailable
	}
	work := fmt.Sprintf("%d jobs", jobs)
	if draining {
		work += ", draining (a second signal exits; jobs go on)"
	}
	return fmt.Sprintf("%s; %s; %s; certificate until %s", state, work, gpus, leaf.NotAfter.UTC().Format(time.RFC3339))
}
