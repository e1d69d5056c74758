package runnerapi

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSelector(t *testing.T) {
	t.Parallel()
	got, err := ParseSelector(" runmesh.io/gpu-model = A100 , rack!=r12, zone in (eu-1, eu-2),tier notin (spot), team, !quarantine ")
	if err != nil {
		t.Fatal(err)
	}
	// By key, as every term must hold in any order.
	want := []Requirement{
		{Key: "quarantine", Op: OpNotExists},
		{Key: "rack", Op: OpNotEquals, Values: []string{"r12"}},
		{Key: "runmesh.io/gpu-model", Op: OpEquals, Values: []string{"A100"}},
		{Key: "team", Op: OpExists},
		{Key: "tier", Op: OpNotIn, Values: []string{"spot"}},
		{Key: "zone", Op: OpIn, Values: []string{"eu-1", "eu-2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if r, err := ParseSelector(""); err != nil || r != nil {
		t.Fatalf("the empty selector: %v, %v", r, err)
	}
	if r, err := ParseSelector("a==b"); err != nil || r[0].Op != OpEquals {
		t.Fatalf("==: %+v, %v", r, err)
	}
	if r, err := ParseSelector("z notin (c), z in (b,a,b), z in (a,b)"); err != nil || !reflect.DeepEqual(r, []Requirement{
		{Key: "z", Op: OpIn, Values: []string{"a", "b"}}, {Key: "z", Op: OpNotIn, Values: []string{"c"}}}) {
		t.Fatalf("a list is a set; terms by key, then operator, each once: %+v, %v", r, err)
	}
	long := strings.Repeat("d", 63)
	if _, err := ParseSelector(strings.Repeat(long+".", 3) + long[:61] + "/" + long + "=x"); err != nil {
		t.Fatalf("the longest key: %v", err)
	}
	for _, bad := range []string{
		"a,", ",a", "a,,b", "zone in (a,b", "zone in a,b)", "zone within (a)", "zone in ()", "zone in (,)", "zone in ( , )", "-bad=x", "a=b c",
		"a=" + strings.Repeat("v", 64), "Bad.Prefix/key=x", "a in ((b))", strings.Repeat("a,", 40) + "a",
		strings.Repeat("x", MaxSelectorBytes+1),
		long + "d.io/a",                                // a DNS label of 64
		strings.Repeat(long+".", 3) + long[:62] + "/a", // a prefix of 254
		"a/b/c", "/a", "a/", "A.io/b",
	} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"runmesh.io/gpu-model": "A100", "zone": "eu-1", "team": ""}
	for sel, want := range map[string]bool{
		"":                          true,
		"runmesh.io/gpu-model=A100": true,
		"runmesh.io/gpu-model=H100": false,
		"zone in (eu-1,eu-2)":       true,
		"zone notin (eu-1)":         false,
		"rack!=r12":                 true, // no such label: it meets !=
		"rack notin (r12)":          true,
		"rack":                      false,
		"!rack":                     true,
		"team":                      true, // an empty value is a label
		"team=":                     true,
		"!team":                     false,
		"zone in (eu-1), runmesh.io/gpu-model=H100": false,
	} {
		reqs, err := ParseSelector(sel)
		if err != nil {
			t.Fatalf("%q: %v", sel, err)
		}
		if got := Matches(reqs, labels); got != want {
			t.Errorf("%q: %v, want %v", sel, got, want)
		}
	}
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"a=b", "a in (b,c)", "!a", "a,b!=c", "x/y notin (z)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		reqs, err := ParseSelector(s)
		if err != nil {
			return
		}
		// What parses is bounded, and matches without panicking.
		if len(reqs) > MaxSelectorRequirements {
			t.Fatalf("%d requirements", len(reqs))
		}
		Matches(reqs, map[string]string{"a": "b"})
		// Written back, it reads as the same selector (a job shows it so).
		again, err := ParseSelector(FormatSelector(reqs))
		if err != nil || !EqualSelectors(reqs, again) {
			t.Fatalf("%q written as %q reads as %v (%v)", s, FormatSelector(reqs), again, err)
		}
	})
}

func TestFormatSelectorReadsBack(t *testing.T) {
	for in, want := range map[string]string{
		" a == b , c in ( d , e ) ,!f": "a=b,c in (d,e),!f",
		"x.io/y notin (z),w!=v,u":      "u,w!=v,x.io/y notin (z)",
		"zone in (b,a,b),a":            "a,zone in (a,b)",
		"a=":                           "a=",
		"":                             "",
	} {
		reqs, err := ParseSelector(in)
		if err != nil || FormatSelector(reqs) != want {
			t.Fatalf("%q: written %q (%v), want %q", in, FormatSelector(reqs), err, want)
		}
		if again, err := ParseSelector(want); err != nil || !EqualSelectors(reqs, again) {
			t.Fatalf("%q reads back as %v (%v)", want, again, err)
		}
	}
}

// Selectors stored as written (before they were kept canonically)
// compare and are shown as the canonical form of the same terms.
func TestEqualSelectorsIgnoresOrderAndRepeats(t *testing.T) {
	t.Parallel()
	asWritten := []Requirement{
		{Key: "zone", Op: OpIn, Values: []string{"b", "a"}},
		{Key: "a", Op: OpNotIn, Values: []string{"x"}},
		{Key: "a", Op: OpEquals, Values: []string{"1"}},
		{Key: "a", Op: OpEquals, Values: []string{"1"}},
	}
	parsed, err := ParseSelector("a=1,a notin (x),zone in (a,b)")
	if err != nil {
		t.Fatal(err)
	}
	if !EqualSelectors(asWritten, parsed) || !EqualSelectors(parsed, asWritten) {
		t.Fatalf("%+v and %+v differ", asWritten, parsed)
	}
	if got := FormatSelector(asWritten); got != "a=1,a notin (x),zone in (a,b)" {
		t.Fatalf("written %q", got)
	}
	if asWritten[0].Values[0] != "b" || len(asWritten) != 4 {
		t.Fatalf("the caller's selector changed: %+v", asWritten)
	}
	if EqualSelectors(parsed, parsed[:2]) {
		t.Fatal("a term fewer: equal")
	}
}

func TestAsLabelValueIsOneASelectorCanName(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H200":                 "NVIDIA-H200",
		"Mock NVIDIA A100-SXM4-40GB":  "Mock-NVIDIA-A100-SXM4-40GB",
		"  (weird)  name!! ":          "weird-name",
		"535.104.05":                  "535.104.05",
		strings.Repeat("a", 70) + "b": strings.Repeat("a", 63),
		"ü":                           "",
	} {
		got := AsLabelValue(in)
		if got != want {
			t.Fatalf("%q: got %q, want %q", in, got, want)
		}
		if err := CheckLabel("k", got); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
	}
}

// Every label an agent may declare (CheckLabel) is one the server takes in
// a capacity report: the two agree on the longest key.
func TestADeclarableLabelIsOneTheServerTakes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("d", 63)
	key := strings.Repeat(long+".", 3) + long[:61] + "/" + long // a prefix of 253
	if len(key) != MaxLabelKeyBytes {
		t.Fatalf("the longest key is %d bytes, not %d", len(key), MaxLabelKeyBytes)
	}
	if err := CheckLabel(key, "v"); err != nil {
		t.Fatal(err)
	}
	c := Capacity{Host: HostCapacity{Cores: 1, MemoryMiB: 1024}, GPUs: []GPU{}, Labels: []Label{{Key: key, Value: "v", Source: LabelDeclared}}}
	if err := CheckCapacity(c); err != nil {
		t.Fatalf("the server refuses it: %v", err)
	}
	if err := CheckLabel(key+"d", "v"); err == nil {
		t.Fatal("a key of more than 63 after its prefix: accepted")
	}
}
