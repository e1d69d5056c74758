package runnerhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode"
	"unicode/utf8"

	"github.com/runmesh/runmesh/runnerapi"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, runnerapi.Error{Error: runnerapi.ErrorBody{Code: code, Message: msg}})
}

// decode reads exactly one JSON object with no unknown fields, within
// runnerapi.MaxBodyBytes.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeWithin(w, r, v, runnerapi.MaxBodyBytes)
}

// decodeWithin is decode within limit bytes. What it refuses is answered
// here: too_large, or bad_request naming what was wrong.
func decodeWithin(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	body, err := readBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	if err == nil {
		err = decodeStrict(body, v)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, runnerapi.CodeTooLarge, fmt.Sprintf("request body over %d bytes", limit))
	default:
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "malformed request: "+err.Error())
	}
	return false
}

// readBody reads a request's body of the length it announced (size, -1
// when unknown) into one buffer of that size, where io.ReadAll would grow
// one from 512 bytes, copying it over at each step: a results body of
// hundreds of jobs would take a dozen buffers. An unknown or implausible
// size is read as io.ReadAll reads it; limit bounds what is believed.
func readBody(r io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 || size > limit {
		return io.ReadAll(r)
	}
	// One byte more, so that the end is seen without growing it.
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			// More than it announced (the server stops a body at its
			// length, so not over HTTP): go on as io.ReadAll does.
			rest, err := io.ReadAll(r)
			return append(b, rest...), err
		}
	}
}

// decodeStrict decodes body into v when it is one JSON object of v's
// fields alone, each named once.
func decodeStrict(body []byte, v any) error {
	if !utf8.Valid(body) {
		// JSON decoders put U+FFFD for such bytes: what was sent would be
		// kept as something else.
		return errors.New("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	// The body is valid JSON now; Go's decoder lets the last of two equal
	// keys win, so a body could say one thing to whatever reads it first
	// and another to us.
	return duplicateKey(body)
}

// duplicateKey refuses valid JSON in which an object names a key twice,
// as encoding/json matches keys to fields: after unescaping, and without
// regard to case ("token" and "Token" are one field to it).
//
// It runs on every request body, results of hundreds of jobs among them, so
// it allocates nothing for a body of usual depth and keys: each object's
// keys are kept folded, one after another, in one buffer (an object's own
// follow those of the objects around it, and go when it ends), and only a
// key with escapes is unescaped through encoding/json.
func duplicateKey(body []byte) error {
	type frame struct {
		object    bool
		expectKey bool
		keys      int // this object's first key in spans
	}
	type span struct{ start, end int } // a folded key in folded
	var (
		framesBuf [16]frame
		spansBuf  [64]span
		foldedBuf [1024]byte
	)
	stack, spans, folded := framesBuf[:0], spansBuf[:0], foldedBuf[:0]
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			stack = append(stack, frame{object: true, expectKey: true, keys: len(spans)})
		case '[':
			stack = append(stack, frame{keys: len(spans)})
		case '}', ']':
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.keys < len(spans) {
				folded = folded[:spans[top.keys].start]
				spans = spans[:top.keys]
			}
		case ',':
			if top := &stack[len(stack)-1]; top.object {
				top.expectKey = true
			}
		case '"':
			end, escaped := stringEnd(body, i)
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				top := &stack[n-1]
				top.expectKey = false
				start := len(folded)
				if escaped {
					var key string
					if err := json.Unmarshal(body[i:end+1], &key); err != nil {
						return err
					}
					folded = appendFolded(folded, []byte(key))
				} else {
					folded = appendFolded(folded, body[i+1:end])
				}
				key := folded[start:]
				for _, k := range spans[top.keys:] {
					if bytes.Equal(folded[k.start:k.end], key) {
						given := string(body[i+1 : end])
						if escaped {
							_ = json.Unmarshal(body[i:end+1], &given)
						}
						return fmt.Errorf("%q given twice in one object", given)
					}
				}
				spans = append(spans, span{start, len(folded)})
			}
			i = end
		}
	}
	return nil
}

// stringEnd is where the JSON string whose opening quote is at body[i]
// ends (its closing quote), and whether it has escapes.
func stringEnd(body []byte, i int) (end int, escaped bool) {
	from := i + 1
	for {
		q := bytes.IndexByte(body[from:], '"')
		if q < 0 {
			return len(body), escaped // not JSON: decodeStrict has refused it before
		}
		b := bytes.IndexByte(body[from:from+q], '\\')
		if b < 0 {
			return from + q, escaped
		}
		// Past the backslash and what it escapes (a quote, say; \uXXXX's
		// digits hold neither a quote nor a backslash).
		escaped = true
		from += b + 2
	}
}

// appendFolded appends key as encoding/json compares it with a field's
// name when the two are not equal: each letter in one case (upper case of
// its lower case), so that every spelling one field matches folds alike.
func appendFolded(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		if c := key[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		dst = utf8.AppendRune(dst, unicode.ToUpper(unicode.ToLower(r)))
		i += n
	}
	return dst
}
