package runnerhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/runnerapi"
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

// Keys past what duplicateKey keeps without allocating (nesting deeper
// than its frames, more keys than its spans, longer keys than its buffer)
// are told apart as well.
func TestDuplicateKeysPastTheBuffers(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 40) + `{"b":1,"b":2}` + strings.Repeat(`}`, 40)
	long := strings.Repeat("k", 3000)
	var many strings.Builder
	many.WriteString(`{`)
	for i := range 200 {
		fmt.Fprintf(&many, `"key%d":{"x":%d},`, i, i)
	}
	for body, dup := range map[string]bool{
		deep: true,
		strings.Replace(deep, `"b":2`, `"c":2`, 1):             false,
		`{"` + long + `":1,"` + strings.ToUpper(long) + `":2}`: true,
		`{"` + long + `":1,"` + long + `x":2}`:                 false,
		many.String() + `"key7":1}`:                            true,
		many.String() + `"KEY199":1}`:                          true,
		many.String() + `"key200":1}`:                          false,
		`{"s":1,"\u017f":2}`:                                   true, // LATIN SMALL LETTER LONG S folds to S
		`{"ſ":1,"S":2}`:                                        true,
		`{"é":1,"É":2}`:                                        true,
		`{"é":1,"e":2}`:                                        false,
	} {
		if err := decodeStrict([]byte(body), new(any)); (err != nil) != dup {
			t.Errorf("%.80s: refused %v (%v), want %v", body, err != nil, err, dup)
		}
	}
}

// The refusal names the key as given, unescaped.
func TestDuplicateKeyNamesTheKey(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"token":"x","Token":"y"}`:    `"Token" given twice in one object`,
		`{"token":"x","\u0074oken":1}`: `"token" given twice in one object`,
	} {
		if err := duplicateKey([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
}

// A results body of the most results a request holds is checked without
// allocating: the check runs on every request.
func TestDuplicateKeyAllocatesNothing(t *testing.T) {
	body := resultsBody(runnerapi.MaxResultsPerRequest)
	if n := testing.AllocsPerRun(20, func() {
		if err := duplicateKey(body); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per body, want 0", n)
	}
}

// resultsBody is a POST /v1/results body of n results, as the agent sends
// one.
func resultsBody(n int) []byte {
	exit, version := 0, "1.2.3"
	req := runnerapi.ResultsRequest{Results: make([]runnerapi.LeaseResult, n)}
	for i := range req.Results {
		req.Results[i] = runnerapi.LeaseResult{LeaseID: uuid.NewString(), ResultRequest: runnerapi.ResultRequest{Attempt: 1, ExitCode: &exit, RunnerVersion: &version}}
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// duplicateKeyAsBefore is duplicateKey as it was first written (a string
// and a folded copy of each key), kept to check the cheaper one against.
func duplicateKeyAsBefore(body []byte) error {
	type frame struct {
		object    bool
		expectKey bool
		keys      []string
	}
	var stack []frame
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			stack = append(stack, frame{object: true, expectKey: true})
		case '[':
			stack = append(stack, frame{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if top := &stack[len(stack)-1]; top.object {
				top.expectKey = true
			}
		case '"':
			end := i + 1
			for body[end] != '"' {
				if body[end] == '\\' {
					end++
				}
				end++
			}
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				top := &stack[n-1]
				top.expectKey = false
				key := string(body[i+1 : end])
				if bytes.IndexByte(body[i+1:end], '\\') >= 0 {
					if err := json.Unmarshal(body[i:end+1], &key); err != nil {
						return err
					}
				}
				folded := strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, key)
				for _, k := range top.keys {
					if k == folded {
						return fmt.Errorf("%q given twice in one object", key)
					}
				}
				top.keys = append(top.keys, folded)
			}
			i = end
		}
	}
	return nil
}

// On any valid JSON, duplicateKey refuses what the first one refused, with
// the same words.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"a":2}`, `{"token":"x","\u0074oken":"y"}`, `{"kinds":[],"\u212Ainds":[]}`, `{"l":[{"a":1},{"a":1,"a":2}]}`,
		`{"a":"\"a\":1,","b":"a"}`, `{"a\"":1,"a":2}`, `{"a\\":1,"a":2}`, `{"s":1,"ſ":2}`, `[{"a":1},{"a":1}]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Add(resultsBody(3))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) || !utf8.Valid(body) {
			return
		}
		got, want := duplicateKey(body), duplicateKeyAsBefore(body)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q: %v, want %v", body, got, want)
		}
	})
}

func BenchmarkDuplicateKey(b *testing.B) {
	body := resultsBody(runnerapi.MaxResultsPerRequest)
	for _, bc := range []struct {
		name string
		f    func([]byte) error
	}{{"now", duplicateKey}, {"before", duplicateKeyAsBefore}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.f(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// readBody reads the whole body whatever length it announced (its own, an
// unknown one, one too short or too long), and a body over the limit stays
// refused as too large.
func TestReadBody(t *testing.T) {
	t.Parallel()
	body := resultsBody(40)
	n := int64(len(body))
	for _, size := range []int64{n, -1, 0, n / 2, n + 100, 1 << 40} {
		got, err := readBody(bytes.NewReader(body), size, 1<<20)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("announced %d: %d bytes, %v; want the %d bytes", size, len(got), err, n)
		}
	}
	rec := httptest.NewRecorder()
	_, err := readBody(http.MaxBytesReader(rec, io.NopCloser(bytes.NewReader(body)), n-1), n, n-1)
	var tooLarge *http.MaxBytesError
	if !errors.As(err, &tooLarge) {
		t.Errorf("a body over the limit: %v, want http.MaxBytesError", err)
	}
}

// A body of the length it announced is read into one buffer.
func TestReadBodyAllocatesOnce(t *testing.T) {
	body := resultsBody(runnerapi.MaxResultsPerRequest)
	r := bytes.NewReader(body)
	if allocs := testing.AllocsPerRun(10, func() {
		r.Reset(body)
		_, _ = readBody(r, int64(len(body)), runnerapi.MaxResultsBodyBytes)
	}); allocs != 1 {
		t.Errorf("%v allocations for a body of the length announced, want 1", allocs)
	}
}
