package config_test

import (
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/runmesh/runmesh/controlplane/config"
)

// A config file is read by an operator's hand and by tooling: whatever it
// holds, Parse returns a config or an error, never panics, and a config it
// accepted is accepted again as it re-reads it.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"version: 1\ndatabase: {url: 'postgres://x'}\nadmin: {listen: '127.0.0.1:8080'}\nrunner: {listen: ':8443', names: [localhost]}\n",
		"version: 1\n", "", "version: 2\n", "version: 1\nunknown: x\n", "{", "version: 1\nrunner: {names: ['a', '']}\n",
		"version: 1\npools: {default_lease_seconds: -1}\n", "version: 1\njobs: {retention_days: 99999999999999999999}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error that says nothing")
			}
			return
		}
		again, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("an accepted config does not marshal: %v", err)
		}
		if _, err := config.Parse(again); err != nil {
			t.Fatalf("accepted %q, but not itself re-read (%q): %v", b, again, err)
		}
	})
}
