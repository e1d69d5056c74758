package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/graph/generated"
	"github.com/runmesh/runmesh/internal/health"
)

// Options configure the admin API handler.
type Options struct {
	// Tenancy, Queue, Fleet and Enrolment are what the API reads and
	// changes, all required; Queue's and Fleet's watches wake
	// subscriptions.
	Tenancy  *tenancy.Service
	Queue    *queue.Service
	Fleet    *fleet.Service
	Log      *slog.Logger
	Defaults Defaults
	// ComplexityLimit bounds the cost of one operation: a field costs 1,
	// a list what an element costs times its page or expected size (see
	// cost.go).
	ComplexityLimit int
	// MaxDepth bounds how deeply an operation's selections nest.
	MaxDepth int
	// MaxBodyBytes bounds a request body; MaxResponseBytes an answer (one
	// over it is replaced by a TOO_LARGE error).
	MaxBodyBytes     int64
	MaxResponseBytes int
	// Enrolment decides on runners and keeps their certificates.
	Enrolment *enrolment.Service
	// CAFingerprint is the root runners pin.
	CAFingerprint string
	// Health is the serving replica's registry: Query.health lists it.
	Health *health.Registry
	// Version is the serving replica's, for Query.version.
	Version string
	// Storage is the jobs' object storage (nil: none).
	Storage *objects.Bucket
	// SocketInitTimeout is how long a websocket may go without
	// connection_init; SocketRecheck how often an open one's token is
	// checked again (0: the defaults).
	SocketInitTimeout, SocketRecheck time.Duration
}

// DefaultComplexityLimit, DefaultMaxBodyBytes and DefaultMaxResponseBytes
// apply when Options leave them zero. The complexity limit lets a page of
// 1,000 jobs with their events and runs through, or the expected fleet
// with its GPUs, labels and health, and not ten such pages in one request.
const (
	DefaultComplexityLimit  = 50000
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxResponseBytes = 16 << 20
)

// NewHandler is the /graphql endpoint: bearer authentication, then gqlgen
// with GET, POST and websocket transports (GraphQL over HTTP, see
// overHTTP), a parsed-query cache and depth and complexity limits.
func NewHandler(o Options) http.Handler {
	if o.ComplexityLimit == 0 {
		o.ComplexityLimit = DefaultComplexityLimit
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.SocketInitTimeout == 0 {
		o.SocketInitTimeout = DefaultSocketInitTimeout
	}
	if o.SocketRecheck == 0 {
		o.SocketRecheck = DefaultSocketRecheck
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Defaults == (Defaults{}) {
		o.Defaults = DefaultDefaults
	}
	r := &Resolver{Tenancy: o.Tenancy, Queue: o.Queue, Fleet: o.Fleet, Enrolment: o.Enrolment,
		Log: o.Log, Defaults: o.Defaults, CAFingerprint: o.CAFingerprint, Health: o.Health, Version: o.Version, Storage: o.Storage}
	srv := handler.New(generated.NewExecutableSchema(generated.Config{
		Resolvers:  r,
		Directives: generated.DirectiveRoot{HasRole: hasRole},
		Complexity: complexity(),
	}))
	logins := newLoginLimit(DefaultFailedLogins, time.Minute)
	srv.AddTransport(transport.Websocket{
		KeepAlivePingInterval: 15 * time.Second,
		InitTimeout:           o.SocketInitTimeout,
		Implementation:        socketCodes{inner: transport.CoderWebsocketImplementation{}},
		InitFunc:              socketInit(o.Tenancy, logins, o.SocketRecheck, o.Log),
	})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.Use(extension.Introspection{})
	srv.Use(depthLimit{max: o.MaxDepth}) // first: the clearer refusal of a deep query
	srv.Use(subscriptionsBySocket{})
	srv.Use(extension.FixedComplexityLimit(o.ComplexityLimit))
	srv.SetErrorPresenter(presentError(o.Log))
	srv.SetRecoverFunc(func(ctx context.Context, p any) error {
		o.Log.ErrorContext(ctx, "graphql resolver panicked", "panic", fmt.Sprint(p))
		return errors.New("internal error")
	})
	srv.AroundFields(auditMutations(o.Tenancy, o.Log))
	srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		if token, ok := ctx.Value(socketTokenKey{}).(string); ok {
			a, err := o.Tenancy.Authenticate(ctx, token)
			if err != nil {
				return graphql.OneShot(graphql.ErrorResponse(ctx, "unauthenticated"))
			}
			ctx = withPrincipal(ctx, a)
		}
		a, _ := principal(ctx)
		return next(context.WithValue(ctx, loadersKey{}, newLoaders(r, a.Scope())))
	})
	return withSocket(limitBody(o.MaxBodyBytes, requireAdmin(o.Tenancy, logins, onlyUTF8(o.MaxBodyBytes, overHTTP(answerShaping(o.MaxResponseBytes, srv))))))
}

type unavailableKey struct{}

// markUnavailable notes that an error of the request's answer is
// CodeUnavailable (see answerShaping).
func markUnavailable(ctx context.Context) {
	if flag, ok := ctx.Value(unavailableKey{}).(*atomic.Bool); ok {
		flag.Store(true)
	}
}

// answerShaping writes an answer as the request's errors say it should go:
// 503 with Retry-After, instead of 200, when one is UNAVAILABLE (one
// retryable answer for every transient failure, whichever part of the
// request met it; errors are presented before the answer is written), and
// a TOO_LARGE error instead of an answer over maxAnswer bytes.
func answerShaping(maxAnswer int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebsocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		flag := new(atomic.Bool)
		next.ServeHTTP(&shapedAnswer{ResponseWriter: w, flag: flag, maxAnswer: maxAnswer}, r.WithContext(context.WithValue(r.Context(), unavailableKey{}, flag)))
	})
}

type shapedAnswer struct {
	http.ResponseWriter
	flag      *atomic.Bool
	written   bool
	maxAnswer int
	sent      int
}

func (w *shapedAnswer) WriteHeader(code int) {
	if !w.written {
		w.written = true
		if w.flag.Load() && code < 300 {
			w.Header().Set("Retry-After", "1")
			code = http.StatusServiceUnavailable
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write sends the answer, unless it is over maxAnswer: then (gqlgen writes
// an answer whole, in one Write) a TOO_LARGE error goes instead.
func (w *shapedAnswer) Write(p []byte) (int, error) {
	if w.sent+len(p) > w.maxAnswer {
		if w.sent > 0 {
			return 0, errors.New("answer over its bound")
		}
		w.sent = len(p)
		if !w.written {
			w.WriteHeader(http.StatusOK)
		}
		_, err := fmt.Fprintf(w.ResponseWriter, `{"errors":[{"message":"the answer is over %d bytes: ask for fewer items (first) or fields","extensions":{"code":"TOO_LARGE"}}],"data":null}`, w.maxAnswer)
		return len(p), err
	}
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	w.sent += len(p)
	return w.ResponseWriter.Write(p)
}

type socketTokenKey struct{}

func cutBearer(s string) (string, bool) {
	if len(s) > 7 && (s[:7] == "Bearer " || s[:7] == "bearer ") {
		return s[7:], true
	}
	return s, false
}

// limitBody refuses bodies over max: up front when Content-Length says so,
// and while reading when it does not.
func limitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeJSONError(w, http.StatusRequestEntityTooLarge, CodeBadInput, fmt.Sprintf("request body over %d bytes", max))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// onlyUTF8 refuses a body that is not UTF-8 (read whole: limitBody bounds
// it): JSON decoders put U+FFFD for such bytes, so a name sent so would be
// stored as something else than was sent.
func onlyUTF8(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeJSONError(w, http.StatusRequestEntityTooLarge, CodeBadInput, fmt.Sprintf("request body over %d bytes", max))
			return
		}
		if !utf8.Valid(body) {
			writeJSONError(w, http.StatusBadRequest, CodeBadInput, "the request body is not valid UTF-8")
			return
		}
		// A batch (a JSON array) is refused here, where the body is read:
		// gqlgen's refusal echoed the body and named a Go type.
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' {
			writeJSONError(w, http.StatusBadRequest, CodeBadInput, "batched operations are not supported: send one operation a request")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
