package devenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/internal/devenv"
)

// The env file is hand-edited: whatever it holds, Read returns values or
// an error, never panics, and no key it returns is empty or holds a space.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		"RUNMESH_ADMIN_URL=http://127.0.0.1:8080\nRUNMESH_ADMIN_TOKEN=rmat_x\n", "export A=b\n", "# comment\n\nA=\n",
		"=x\n", "A\n", "A='quoted'\n", "A=\"quoted\"\n", strings.Repeat("A", 70000) + "=x\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "dev.env")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		env, err := devenv.Read(path)
		if err != nil {
			return
		}
		for k := range env {
			if k == "" || strings.ContainsAny(k, " \t\n=") {
				t.Fatalf("key %q from %q", k, b)
			}
		}
	})
}
