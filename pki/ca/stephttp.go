package ca

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The step-ca routes are reachable by anyone who can open a connection to
// the runner listener, most of them before any authentication. Everything
// step-ca would parse is bounded first.

// MaxStepBodyBytes bounds a step-ca request's body: the largest, /sign, is
// a CSR and a token of a few KiB.
const MaxStepBodyBytes = 64 << 10

// maxSerialChars bounds a serial to revoke: X.509 serials are at most 20
// bytes, 49 decimal digits.
const maxSerialChars = 64

// stepError answers in step-ca's JSON error format, which the step CLI
// reads.
func stepError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "message": msg})
}

// boundStepBody refuses a body over MaxStepBodyBytes before anything
// reads it (413), and cuts one that grows past it while read.
func boundStepBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxStepBodyBytes {
			stepError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", MaxStepBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxStepBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// checkRevoke reads a revocation request (bounded) and refuses, before
// step-ca parses it, one that names no caller (neither a client
// certificate nor a one-time token) or a serial no certificate can have.
// What passes is handed on as it came.
func checkRevoke(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			stepError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", MaxStepBodyBytes))
			return
		}
		var req struct {
			Serial string `json:"serial"`
			OTT    string `json:"ott"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			stepError(w, http.StatusBadRequest, "malformed revocation request")
			return
		}
		if !plausibleSerial(req.Serial) {
			stepError(w, http.StatusBadRequest, fmt.Sprintf("serial: 1 to %d digits", maxSerialChars))
			return
		}
		if req.OTT == "" && (r.TLS == nil || len(r.TLS.PeerCertificates) == 0) {
			stepError(w, http.StatusUnauthorized, "revocation needs a client certificate or a token")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// plausibleSerial: decimal digits, or hexadecimal after 0x, within
// maxSerialChars.
func plausibleSerial(s string) bool {
	digits, isHex := strings.CutPrefix(strings.ToLower(s), "0x")
	if digits == "" || len(s) > maxSerialChars {
		return false
	}
	for _, c := range digits {
		if !('0' <= c && c <= '9' || isHex && 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
