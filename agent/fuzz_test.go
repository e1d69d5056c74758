package agent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runmesh/runmesh/agent"
)

// Whatever the agent's config file holds, LoadConfig returns a config or
// an error, never panics; an error always says what it refused.
func FuzzLoadConfig(f *testing.F) {
	for _, seed := range []string{
		"version: 1\n", "", "version: 2\n", "version: 1\nwork_dri: /x\n", "version: 1\nlabels: {rack: r1}\n",
		"version: 1\nmetrics: {listen: '127.0.0.1:9400'}\npodman: /usr/bin/podman\nkinds: [default, gpu]\n",
		"version: 1\nlabels: {runmesh.io/gpu.count: '64'}\n", "version: 1\nkinds: ['']\n", "[", "version: 1\nlabels: {'': x}\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := agent.LoadConfig(path, "/var/lib/runmesh-agent"); err != nil && err.Error() == "" {
			t.Fatal("an error that says nothing")
		}
	})
}
