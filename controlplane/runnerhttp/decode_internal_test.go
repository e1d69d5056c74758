package runnerhttp

import (
	"testing"
)

// A key is refused when one object names it twice as Go's decoder would
// read it (after unescaping, in any case), and only then: the same key in
// two objects, in an array's objects, or as a value is no duplicate.
func TestDuplicateKeysAreRefused(t *testing.T) {
	t.Parallel()
	for body, dup := range map[string]bool{
		`{"a":1,"a":2}`:                         true,
		`{"token":"x","Token":"y"}`:             true,
		`{"token":"x","\u0074oken":"y"}`:        true,
		`{"kinds":[],"\u212Ainds":[]}`:          true, // KELVIN SIGN folds to k
		`{"o":{"a":1,"b":{"c":1,"c":2}}}`:       true,
		`{"l":[{"a":1},{"a":1,"a":2}]}`:         true,
		`{"a":{"x":1},"b":2,"a":3}`:             true,
		`{"a":1,"b":2}`:                         false,
		`{"a":{"a":1},"b":{"a":2}}`:             false,
		`{"l":[{"a":1},{"a":2}],"a":"a"}`:       false,
		`{"a":"\"a\":1,","b":"a"}`:              false,
		`{"a\"":1,"a":2}`:                       false,
		`{"a\\":1,"a":2}`:                       false,
		`[{"a":1},{"a":1}]`:                     false,
		`{"a":[1,{"b":[{"c":1}],"c":1}],"c":1}`: false,
		`{}`:                                    false,
	} {
		if err := decodeStrict([]byte(body), new(any)); (err != nil) != dup {
			t.Errorf("%s: refused %v (%v), want %v", body, err != nil, err, dup)
		}
	}
}
