package graph

import (
	"context"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// GraphQL over HTTP (the GraphQL-over-HTTP specification): queries by GET
// or POST, mutations by POST only, an answer in
// application/graphql-response+json when the client accepts it, and the
// status codes the specification gives for each. gqlgen's transports do
// most of it; overHTTP mends where they differ:
//   - a method other than GET and POST is 405 with Allow (gqlgen: 400, as
//     text);
//   - a mutation sent by GET is 405 with Allow: POST (gqlgen: 406);
//   - a request that does not parse or validate is 200 under
//     application/json, as the specification has it for that media type
//     (gqlgen: 422; under application/graphql-response+json it is 400);
//   - a batch (a JSON array) is refused plainly, by onlyUTF8, which reads
//     the body: gqlgen's message echoed the body and named a Go type;
//   - answers are not cached (they depend on the token);
//   - a subscription by GET or POST is refused (subscriptionsBySocket).
func overHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebsocketUpgrade(r) {
			next.ServeHTTP(w, r) // the connection is hijacked: no status to mend
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			writeJSONError(w, http.StatusMethodNotAllowed, CodeBadInput, "use GET for queries and POST for any operation")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(&statusMending{ResponseWriter: w, get: r.Method == http.MethodGet}, r)
	})
}

// statusMending rewrites the status codes of gqlgen's answers that the
// specification has otherwise (see overHTTP).
type statusMending struct {
	http.ResponseWriter
	get     bool
	written bool
}

func (w *statusMending) WriteHeader(code int) {
	if w.written {
		return
	}
	w.written = true
	json := strings.HasPrefix(w.Header().Get("Content-Type"), "application/json")
	switch {
	case w.get && code == http.StatusNotAcceptable:
		w.Header().Set("Allow", "POST")
		code = http.StatusMethodNotAllowed
	case json && code == http.StatusUnprocessableEntity:
		code = http.StatusOK
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusMending) Write(p []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush passes through, for answers that stream.
func (w *statusMending) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// subscriptionsBySocket refuses a subscription sent by GET or POST, which
// gqlgen would answer with its first item alone: a client that sends one
// so would take one event for the whole stream. Subscriptions go over a
// websocket (graphql-transport-ws).
type subscriptionsBySocket struct{}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = subscriptionsBySocket{}

func (subscriptionsBySocket) ExtensionName() string                   { return "SubscriptionsBySocket" }
func (subscriptionsBySocket) Validate(graphql.ExecutableSchema) error { return nil }
func (subscriptionsBySocket) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if rc.Operation == nil || rc.Operation.Operation != ast.Subscription || socketFrom(ctx) != nil {
		return nil
	}
	err := gqlerror.Errorf("subscriptions need a websocket (graphql-transport-ws) at this endpoint")
	err.Extensions = map[string]any{"code": CodeBadInput}
	return err
}
