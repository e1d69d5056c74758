package runnerhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
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
func duplicateKey(body []byte) error {
	type frame struct {
		object    bool
		expectKey bool
		keys      []string // folded
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
				folded := foldKey(key)
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

// foldKey is key as encoding/json compares it with a field's name when
// the two are not equal: each letter in one case, so that every spelling
// one field matches folds alike.
func foldKey(key string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, key)
}
