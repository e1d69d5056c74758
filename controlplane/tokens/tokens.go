// Package tokens makes and checks the bearer secrets runmesh hands out:
// admin tokens and enrolment tokens. A token is 256 random bits behind a
// prefix naming its kind (so a leaked one is recognisable to a secret
// scanner, and one kind is never accepted as the other); the server keeps
// only its SHA-256 digest.
package tokens

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Kind is a kind of token.
type Kind struct{ Prefix string }

var (
	// Admin tokens authenticate the GraphQL admin API.
	Admin = Kind{Prefix: "rmat_"}
	// Enrolment tokens let one runner enrol into one pool, once.
	Enrolment = Kind{Prefix: "rmet_"}
)

var enc = base64.RawURLEncoding

// New returns a fresh token and the digest to store.
func (k Kind) New() (token string, digest []byte) {
	b := make([]byte, 32)
	rand.Read(b)
	token = k.Prefix + enc.EncodeToString(b)
	d := sha256.Sum256([]byte(token))
	return token, d[:]
}

// Digest returns the digest of a well-formed token of this kind, and false
// for anything that cannot be one (so it never reaches the database).
func (k Kind) Digest(token string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(token, k.Prefix)
	if !ok || len(rest) != enc.EncodedLen(32) {
		return nil, false
	}
	if _, err := enc.DecodeString(rest); err != nil {
		return nil, false
	}
	d := sha256.Sum256([]byte(token))
	return d[:], true
}
