// Package admintoken makes and checks admin bearer tokens. A token is 256
// random bits behind a fixed prefix (so a leaked one is recognisable in a
// scanner); the server keeps only its SHA-256 digest.
package admintoken

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Prefix starts every admin token.
const Prefix = "rmat_"

var enc = base64.RawURLEncoding

// New returns a fresh token and the digest to store.
func New() (token string, digest []byte) {
	b := make([]byte, 32)
	rand.Read(b)
	token = Prefix + enc.EncodeToString(b)
	d := sha256.Sum256([]byte(token))
	return token, d[:]
}

// Digest returns the digest of a well-formed token, and false for anything
// that cannot be a token (so it never reaches the database).
func Digest(token string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(token, Prefix)
	if !ok || len(rest) != enc.EncodedLen(32) {
		return nil, false
	}
	if _, err := enc.DecodeString(rest); err != nil {
		return nil, false
	}
	d := sha256.Sum256([]byte(token))
	return d[:], true
}
