package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/agent"
)

func load(t *testing.T, body string) (agent.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return agent.LoadConfig(path, "/var/lib/runmesh-agent")
}

func TestLoadIsStrict(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		"":                           "missing required setting version",
		"labels: {rack: r1}\n":       "missing required setting version",
		"version: 2\n":               "invalid setting version",
		"version: 1\nwork_dri: /x\n": "field work_dri not found",
		"version: 1\nlabels: {runmesh.io/gpu.count: '64'}\n": "invalid setting labels",
		"version: 1\nlabels: {rack: 'row 12'}\n":             "is not a label value",
		"version: 1\nlabels: {'rack name': r1}\n":            "is not a label key",
		"version: 1\nmetrics: {listen: nonsense}\n":          "invalid setting metrics.listen",
		"version: 1\npodman: podman\n":                       `invalid setting podman: "podman" is not an absolute path`,
		"version: 1\nkinds: []\n":                            "invalid setting kinds: 1 to 16 job kinds",
		"version: 1\nkinds: [GPU]\n":                         `invalid setting kinds: "GPU" is not a lower-case name`,
	} {
		_, err := load(t, body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error saying %q", body, err, want)
		}
	}
	c, err := load(t, "version: 1\npodman: /usr/bin/podman\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Podman != "/usr/bin/podman" || c.WorkDir != "/var/lib/runmesh-agent/work" || c.Metrics.Listen != "127.0.0.1:9400" ||
		len(c.Kinds) != 1 || c.Kinds[0] != "default" {
		t.Fatalf("got %+v", c)
	}
}
