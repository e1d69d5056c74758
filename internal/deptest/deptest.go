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

// LinkedPast is what the packages of pattern link, following imports
// through every package but those of stop (which are listed but not
// followed): for a package that may speak to some packages (the domain)
// but must not reach, past them, what they use (the store, the driver).
func LinkedPast(t *testing.T, pattern string, stop []string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, out)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	roots, err := exec.Command("go", "list", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, roots)
	}
	domain := map[string]bool{}
	for _, p := range stop {
		if _, ok := imports[p]; !ok {
			t.Fatalf("%s does not link %s: the list of packages to stop at is stale", pattern, p)
		}
		domain[p] = true
	}
	seen := map[string]bool{}
	todo := strings.Fields(string(roots))
	var reached []string
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		reached = append(reached, p)
		if !domain[p] {
			todo = append(todo, imports[p]...)
		}
	}
	if len(reached) < len(stop) {
		t.Fatalf("go list %s reached %d packages: the check would pass vacuously", pattern, len(reached))
	}
	return reached
}
