package graph

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/controlplane/tokens"
)

type principalKey struct{}

// withPrincipal records who is calling.
func withPrincipal(ctx context.Context, a store.Admin) context.Context {
	return context.WithValue(ctx, principalKey{}, a)
}

// principal is who is calling. Every request that reaches a resolver has
// one: the HTTP and websocket entry points refuse requests without.
func principal(ctx context.Context) (store.Admin, bool) {
	a, ok := ctx.Value(principalKey{}).(store.Admin)
	return a, ok
}

var errUnauthenticated = errors.New("unauthenticated")

// authenticate resolves a bearer token to its admin. Missing, malformed,
// unknown, expired and revoked tokens all give errUnauthenticated.
func authenticate(ctx context.Context, s *store.Store, token string) (store.Admin, error) {
	digest, ok := tokens.Admin.Digest(token)
	if !ok {
		return store.Admin{}, errUnauthenticated
	}
	a, err := s.AdminByTokenHash(ctx, digest)
	if errors.Is(err, store.ErrNotFound) {
		return store.Admin{}, errUnauthenticated
	}
	return a, err
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// requireAdmin answers 401, with no detail, to any request without a live
// admin token. Websocket upgrades pass: they authenticate in the
// connection_init message, because browsers cannot set headers on them.
func requireAdmin(s *store.Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebsocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		a, err := authenticate(r.Context(), s, bearer(r))
		if errors.Is(err, errUnauthenticated) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="runmesh"`)
			writeJSONError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "unauthenticated")
			return
		}
		if err != nil {
			writeJSONError(w, http.StatusServiceUnavailable, "INTERNAL", "internal error")
			return
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), a)))
	})
}

func isWebsocketUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
