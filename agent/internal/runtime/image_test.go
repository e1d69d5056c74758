package runtime_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/containers/podman/v5/pkg/errorhandling"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

// How podman's service reports a failed pull, and whose fault that is. The
// texts are what podman 4.3 streamed in the sandbox (TestJobsInTheSandbox's
// "pull failures" pulls each class for real).
func TestClassifyPull(t *testing.T) {
	t.Parallel()
	stream := errors.New // a failure during the pull: its text, in the stream
	for _, c := range []struct {
		image    string
		err      error
		class    string
		jobFault bool
	}{
		{"nope", stream(`short-name "nope" did not resolve to an alias and no unqualified-search registries are defined in "/etc/containers/registries.conf"`), runtime.ImageUnknown, true},
		{"127.0.0.1:5000/team/app:1", stream("initializing source docker://127.0.0.1:5000/team/app:1: reading manifest 1 in 127.0.0.1:5000/team/app: manifest unknown"), runtime.ImageUnknown, true},
		{"127.0.0.1:5000/none", stream("initializing source docker://127.0.0.1:5000/none:latest: reading manifest latest in 127.0.0.1:5000/none: name unknown: repository name not known to registry"), runtime.ImageUnknown, true},
		// Before the pull starts, the service refuses a reference it cannot parse.
		{"Bad/Name", &errorhandling.ErrorModel{ResponseCode: 400, Message: "invalid reference format: repository name must be lowercase"}, runtime.ImageUnknown, true},
		{"registry.invalid/x/y:1", stream(`initializing source docker://registry.invalid/x/y:1: pinging container registry registry.invalid: Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid on 10.255.255.53:53: no such host`), runtime.RegistryUnreachable, false},
		{"127.0.0.1:1/x:1", stream(`initializing source docker://127.0.0.1:1/x:1: pinging container registry 127.0.0.1:1: Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`), runtime.RegistryUnreachable, false},
		{"127.0.0.1:5001/private/app:1", stream("initializing source docker://127.0.0.1:5001/private/app:1: reading manifest 1 in 127.0.0.1:5001/private/app: unauthorized: authentication required"), runtime.LoginRefused, false},
		{"127.0.0.1:5001/private/app:1", stream("initializing source docker://127.0.0.1:5001/private/app:1: requested access to the resource is denied"), runtime.LoginRefused, false},
		{"docker.io/library/busybox", stream(`writing blob: adding layer with blob "sha256:…": no space left on device`), runtime.DiskFull, false},
		// The service itself did not answer: the host's.
		{"docker.io/library/busybox", &runtime.APIError{URI: "unix:///run/user/990/podman/podman.sock", Err: syscall.ECONNREFUSED}, runtime.PullFailed, false},
		{"docker.io/library/busybox", &errorhandling.ErrorModel{ResponseCode: 500, Message: "internal error"}, runtime.PullFailed, false},
		// An image this host was meant to have built: the host's fault, whatever the registry said.
		{"localhost/absent:latest", stream(`initializing source docker://localhost/absent:latest: pinging container registry localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443: connect: connection refused`), runtime.RegistryUnreachable, false},
		{"localhost/absent:latest", stream("reading manifest latest in localhost/absent: manifest unknown"), runtime.ImageUnknown, false},
		// Wrapped as the bindings join the stream's errors.
		{"127.0.0.1:5000/a:1", fmt.Errorf("pull: %w", errors.Join(stream("reading manifest 1 in 127.0.0.1:5000/a: manifest unknown"))), runtime.ImageUnknown, true},
		// A line longer than the detail may be, cut inside a character of
		// more than one byte.
		{"docker.io/x", stream(strings.Repeat("é", 149) + "x€€€ no space left on device"), runtime.DiskFull, false},
	} {
		e := runtime.ClassifyPull(c.image, c.err)
		if e.Class != c.class || e.JobFault != c.jobFault {
			t.Errorf("%s: %v: class %q, job fault %v; want %q, %v", c.image, c.err, e.Class, e.JobFault, c.class, c.jobFault)
		}
		if e.Detail == "" || len(e.Detail) > 300 || !utf8.ValidString(e.Detail) {
			t.Errorf("%s: detail %q", c.image, e.Detail)
		}
		if !strings.Contains(e.Error(), c.image) {
			t.Errorf("%s: %q does not name the image", c.image, e.Error())
		}
	}
}
