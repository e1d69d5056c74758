// Package devenv reads and writes dev.env, the KEY=value file
// `runmesh-server dev` leaves for scripts and the runmesh CLI. It imports
// only the standard library, so the CLI can read it without linking the
// server.
package devenv

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/runmesh/runmesh/runnerapi"
)

// FileName is dev.env's name in the dev state directory.
const FileName = "dev.env"

// Keys dev.env holds, in the order they are written.
var Keys = []string{"RUNMESH_ADMIN_URL", "RUNMESH_RUNNER_URL", "RUNMESH_ADMIN_TOKEN", "RUNMESH_CA_FINGERPRINT"}

// Read parses KEY=value lines; blank lines, comments and an "export "
// prefix are allowed, so the file can be hand-edited and sourced. Any other
// line is an error that names it.
func Read(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || !runnerapi.ValidEnvName(k) {
			return nil, fmt.Errorf("%s:%d: not a KEY=value line", path, n)
		}
		env[k] = strings.Trim(v, `"'`)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}

// Write replaces path with env's known keys, mode 0600 (it holds a token),
// atomically.
func Write(path string, env map[string]string) error {
	var b strings.Builder
	for _, k := range Keys {
		if v := env[k]; v != "" {
			fmt.Fprintf(&b, "%s=%s\n", k, v)
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
