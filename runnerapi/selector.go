package runnerapi

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A label selector, in Kubernetes' syntax: requirements separated by
// commas, all of which a runner's labels (detected and declared) must
// meet. `key=value` (or `==`), `key!=value`, `key in (a,b)`,
// `key notin (a,b)`, `key` (it has the label) and `!key` (it has not).
// A runner without the label meets `!=` and `notin`, as in Kubernetes.

// Selector operators.
const (
	OpEquals    = "="
	OpNotEquals = "!="
	OpIn        = "in"
	OpNotIn     = "notin"
	OpExists    = "exists"
	OpNotExists = "!exists"
)

// Requirement is one term of a selector.
type Requirement struct {
	Key    string   `json:"key"`
	Op     string   `json:"op"`
	Values []string `json:"values,omitempty"`
}

// Bounds on a selector.
const (
	MaxSelectorBytes        = 4096
	MaxSelectorRequirements = 32
	maxSelectorValues       = 64
)

// MaxLabelKeyBytes is the longest label key: a DNS prefix of up to 253
// bytes, '/', and a name of up to 63.
const MaxLabelKeyBytes = 253 + 1 + 63

var (
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$`)
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelValue  = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
)

// checkKey says why key is not a label key, as Kubernetes has them.
func checkKey(key string) error {
	prefix, name, scoped := strings.Cut(key, "/")
	if !scoped {
		prefix, name = "", key
	}
	if !labelName.MatchString(name) || scoped && (len(prefix) > 253 || !labelPrefix.MatchString(prefix)) {
		return fmt.Errorf("%q is not a label key (an optional DNS name and '/', then up to 63 letters, digits, '-', '_' or '.', a letter or digit at each end)", key)
	}
	return nil
}

// checkValue says why value is not a label value.
func checkValue(value string) error {
	if !labelValue.MatchString(value) {
		return fmt.Errorf("%q is not a label value (up to 63 letters, digits, '-', '_' or '.', a letter or digit at each end)", value)
	}
	return nil
}

// ParseSelector reads a selector ("" selects every runner).
func ParseSelector(s string) ([]Requirement, error) {
	if len(s) > MaxSelectorBytes {
		return nil, fmt.Errorf("selector: longer than %d bytes", MaxSelectorBytes)
	}
	var out []Requirement
	for rest := strings.TrimSpace(s); rest != ""; {
		term, tail, err := nextTerm(rest)
		if err != nil {
			return nil, fmt.Errorf("selector: %w", err)
		}
		r, err := parseTerm(term)
		if err != nil {
			return nil, fmt.Errorf("selector: %q: %w", term, err)
		}
		out = append(out, r)
		if len(out) > MaxSelectorRequirements {
			return nil, fmt.Errorf("selector: more than %d requirements", MaxSelectorRequirements)
		}
		rest = tail
	}
	return canonical(out), nil
}

// canonical is reqs in the one form ParseSelector gives: every term must
// hold, in any order, so they are kept by key (as Kubernetes does), then
// operator, then values, each once; a list's values are a set, sorted and
// each once. One selector written two ways reads back as one. reqs itself
// is not changed.
func canonical(reqs []Requirement) []Requirement {
	if reqs == nil {
		return nil
	}
	out := slices.Clone(reqs)
	for i, r := range out {
		if r.Op == OpIn || r.Op == OpNotIn {
			out[i].Values = slices.Compact(slices.Sorted(slices.Values(r.Values)))
		}
	}
	slices.SortFunc(out, func(a, b Requirement) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if c := strings.Compare(a.Op, b.Op); c != 0 {
			return c
		}
		return slices.Compare(a.Values, b.Values)
	})
	return slices.CompactFunc(out, sameRequirement)
}

func sameRequirement(x, y Requirement) bool {
	return x.Key == y.Key && x.Op == y.Op && slices.Equal(x.Values, y.Values)
}

// nextTerm cuts the first requirement off s: up to a comma outside
// parentheses.
func nextTerm(s string) (term, rest string, err error) {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				term, rest = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
				if term == "" || rest == "" {
					return "", "", fmt.Errorf("an empty requirement")
				}
				return term, rest, nil
			}
		}
		if depth < 0 || depth > 1 {
			return "", "", fmt.Errorf("unbalanced parentheses")
		}
	}
	if depth != 0 {
		return "", "", fmt.Errorf("unbalanced parentheses")
	}
	return strings.TrimSpace(s), "", nil
}

func parseTerm(t string) (Requirement, error) {
	if k, ok := strings.CutPrefix(t, "!"); ok {
		return requirement(strings.TrimSpace(k), OpNotExists, nil)
	}
	for _, op := range []string{"!=", "==", "="} {
		if k, v, ok := strings.Cut(t, op); ok {
			o := op
			if op == "==" {
				o = OpEquals
			}
			return requirement(strings.TrimSpace(k), o, []string{strings.TrimSpace(v)})
		}
	}
	if i := strings.IndexByte(t, '('); i >= 0 {
		head, list := strings.Fields(t[:i]), t[i:]
		if len(head) != 2 || (head[1] != OpIn && head[1] != OpNotIn) || !strings.HasSuffix(list, ")") {
			return Requirement{}, fmt.Errorf("want KEY in (A,B) or KEY notin (A,B)")
		}
		var vals []string
		for _, v := range strings.Split(list[1:len(list)-1], ",") {
			vals = append(vals, strings.TrimSpace(v))
		}
		return requirement(head[0], head[1], vals)
	}
	return requirement(t, OpExists, nil)
}

// requirement checks one term. The values of a list are a set: `in
// (b,a,b)` is `in (a,b)`.
func requirement(key, op string, vals []string) (Requirement, error) {
	if err := checkKey(key); err != nil {
		return Requirement{}, err
	}
	if len(vals) > maxSelectorValues {
		return Requirement{}, fmt.Errorf("more than %d values", maxSelectorValues)
	}
	for _, v := range vals {
		if err := checkValue(v); err != nil {
			return Requirement{}, err
		}
	}
	if op == OpIn || op == OpNotIn {
		// `()` and `(,)` alike: no value but the empty one, which a
		// list could not be written back with.
		if !slices.ContainsFunc(vals, func(v string) bool { return v != "" }) {
			return Requirement{}, fmt.Errorf("an empty list")
		}
	}
	return Requirement{Key: key, Op: op, Values: vals}, nil
}

// Matches reports whether labels meet every requirement.
func Matches(reqs []Requirement, labels map[string]string) bool {
	for _, r := range reqs {
		v, has := labels[r.Key]
		var ok bool
		switch r.Op {
		case OpEquals:
			ok = has && v == r.Values[0]
		case OpNotEquals:
			ok = !has || v != r.Values[0]
		case OpIn:
			ok = has && slices.Contains(r.Values, v)
		case OpNotIn:
			ok = !has || !slices.Contains(r.Values, v)
		case OpExists:
			ok = has
		case OpNotExists:
			ok = !has
		}
		if !ok {
			return false
		}
	}
	return true
}

// FormatSelector writes requirements back in the selector syntax,
// canonically (see canonical): what ParseSelector reads as the same
// requirements.
func FormatSelector(reqs []Requirement) string {
	reqs = canonical(reqs)
	terms := make([]string, len(reqs))
	for i, r := range reqs {
		switch r.Op {
		case OpExists:
			terms[i] = r.Key
		case OpNotExists:
			terms[i] = "!" + r.Key
		case OpIn, OpNotIn:
			terms[i] = r.Key + " " + r.Op + " (" + strings.Join(r.Values, ",") + ")"
		default:
			terms[i] = r.Key + r.Op + strings.Join(r.Values, "")
		}
	}
	return strings.Join(terms, ",")
}

// EqualSelectors reports whether two selectors select alike as written:
// the same terms, in any order (see canonical).
func EqualSelectors(a, b []Requirement) bool {
	return slices.EqualFunc(canonical(a), canonical(b), sameRequirement)
}

// CheckLabel says why a selector could not name a label with this key and
// value (nil: one can).
func CheckLabel(key, value string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return checkValue(value)
}

// AsLabelValue makes a detected fact (a GPU's model name, say) a label
// value a selector can name: each run of other characters becomes one
// '-', with a letter or digit at each end, at most 63 characters.
func AsLabelValue(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range s {
		ok := c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
		switch {
		case ok:
			b.WriteRune(c)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	out := b.String()
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.TrimFunc(out, func(c rune) bool { return c == '-' || c == '.' || c == '_' })
}
