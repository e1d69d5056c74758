package jobrun_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/runmesh/runmesh/agent/internal/jobrun"
)

// What podman 4.3 says when a pull fails, and whose fault that is.
func TestClassifyPullError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		image, stderr string
		jobFault      bool
	}{
		{"nope", `Error: short-name "nope" did not resolve to an alias and no unqualified-search registries are defined in "/etc/containers/registries.conf"`, true},
		{"registry.example/team/app:1", "Error: initializing source docker://registry.example/team/app:1: reading manifest 1 in registry.example/team/app: manifest unknown", true},
		{"registry.example/none", "Error: initializing source docker://registry.example/none:latest: reading manifest latest in registry.example/none: name unknown: repository name not known to registry", true},
		{"Bad/Name", "Error: invalid reference format: repository name must be lowercase", true},
		{"registry.invalid/x/y:1", `Error: initializing source docker://registry.invalid/x/y:1: pinging container registry registry.invalid: Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid on 10.255.255.53:53: no such host`, false},
		{"docker.io/library/busybox", "Error: writing blob: adding layer with blob \"sha256:…\": no space left on device", false},
		// An image this host was meant to have built: the host's fault, whatever the registry said.
		{"localhost/absent:latest", `time="…" level=warning msg="Failed, retrying in 1s ... (1/3)."
Error: initializing source docker://localhost/absent:latest: pinging container registry localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443: connect: connection refused`, false},
		{"localhost/absent:latest", "Error: reading manifest latest in localhost/absent: manifest unknown", false},
		// A line longer than the detail may be, cut inside a character of
		// more than one byte.
		{"docker.io/x", "Error: " + strings.Repeat("é", 149) + "x€€€ no space left on device", false},
	} {
		e := jobrun.ClassifyPullError(c.image, c.stderr)
		if e.JobFault != c.jobFault {
			t.Errorf("%s: %s: job fault %v, want %v", c.image, c.stderr, e.JobFault, c.jobFault)
		}
		if e.Detail == "" || len(e.Detail) > 300 || !utf8.ValidString(e.Detail) {
			t.Errorf("%s: detail %q", c.image, e.Detail)
		}
	}
}
