package agent

import (
	"fmt"
	"strings"

	"github.com/runmesh/runmesh/internal/health"
)

// statusLine is sd_notify STATUS=, one line: the phase, the jobs held
// (jobs < 0: not known yet), when the certificate ends, then the
// registry's summary, which names every condition that is not healthy.
func statusLine(p phase, jobs int, conds []health.Status) string {
	parts := []string{p.String()}
	if jobs >= 0 {
		parts = append(parts, fmt.Sprintf("%d jobs", jobs))
	}
	// The summary leaves a healthy condition's text out, and the
	// certificate's end is what an operator looks for.
	if c, ok := lookup(conds, condCertificate); ok && c.OK {
		parts = append(parts, "certificate "+c.Text)
	}
	parts = append(parts, health.Summarise(conds))
	return strings.Join(parts, "; ")
}

func (p phase) String() string {
	switch p {
	case starting:
		return "starting"
	case serving:
		return "serving"
	case draining:
		return "draining"
	case stopped:
		return "stopped"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// lookup finds the condition named name.
func lookup(conds []health.Status, name string) (health.Status, bool) {
	for _, c := range conds {
		if c.Name == name {
			return c, true
		}
	}
	return health.Status{}, false
}
