// Package deptest checks a package's transitive imports against a list of
// forbidden packages, each with the reason it is forbidden. Each binary has a
// deps test built on it, so a wall between the parts is kept by the test
// suite, not by review (the model is Tailscale's tstest/deptest).
package deptest

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// Forbidden maps an import path prefix to why the package under test must
// not link it. A prefix matches the path itself and everything below it.
type Forbidden map[string]string

// Check fails t if any package in the dependency closure of pkgs (import
// paths or patterns, as go list takes them) is forbidden. It also fails when
// go list reports nothing, so that a broken pattern cannot pass vacuously.
func Check(t *testing.T, pkgs []string, forbidden Forbidden) {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", pkgs, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list %v printed no packages: the check would pass vacuously", pkgs)
	}
	// One error a forbidden entry, naming the first package linked under it:
	// the reason is what the reader needs, not every subpackage.
	seen := map[string]bool{}
	for _, v := range Violations(deps, forbidden) {
		if !seen[v.Why] {
			seen[v.Why] = true
			t.Errorf("%v links %s: %s", pkgs, v.Import, v.Why)
		}
	}
}

// Violation is one forbidden import found, with the reason.
type Violation struct {
	Import string
	Why    string
}

// Violations returns the entries of deps that forbidden names, in the order
// of deps.
func Violations(deps []string, forbidden Forbidden) []Violation {
	prefixes := make([]string, 0, len(forbidden))
	for p := range forbidden {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	var bad []Violation
	for _, d := range deps {
		for _, p := range prefixes {
			if d == p || strings.HasPrefix(d, p+"/") {
				bad = append(bad, Violation{Import: d, Why: forbidden[p]})
				break
			}
		}
	}
	return bad
}

// StdlibOnly fails t if a package in the closure of pkgs is neither in the
// standard library nor matched by allowed (import path prefixes).
func StdlibOnly(t *testing.T, pkgs []string, allowed ...string) {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", pkgs, err, out)
	}
	nonstd := strings.Fields(string(out))
	if len(nonstd) == 0 {
		t.Fatalf("go list %v printed no packages of its own: the check would pass vacuously", pkgs)
	}
	for _, d := range NotAllowed(nonstd, allowed) {
		t.Errorf("%v imports %s: only the standard library and %v are allowed", pkgs, d, allowed)
	}
}

// NotAllowed returns the entries of deps matched by no prefix in allowed.
func NotAllowed(deps, allowed []string) []string {
	var bad []string
outer:
	for _, d := range deps {
		for _, p := range allowed {
			if d == p || strings.HasPrefix(d, p+"/") {
				continue outer
			}
		}
		bad = append(bad, d)
	}
	return bad
}
