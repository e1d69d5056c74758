package graph

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Error codes clients may rely on (extensions.code).
const (
	CodeNotFound  = "NOT_FOUND"
	CodeForbidden = "FORBIDDEN"
	CodeConflict  = "CONFLICT"
	CodeBadInput  = "BAD_INPUT"
	CodeInternal  = "INTERNAL"
	// CodeUnavailable: nothing was done, for now; the same request may
	// succeed when sent again (the HTTP answer is 503 with Retry-After).
	CodeUnavailable = "UNAVAILABLE"
	outcomeSuccess  = "OK"
)

var errForbidden = errors.New("forbidden")

// badInputf is a refusal whose message is meant for the caller.
func badInputf(format string, args ...any) error { return record.Invalidf(format, args...) }

// errorCode classifies err for clients and the audit log.
func errorCode(err error) string {
	switch {
	case err == nil:
		return outcomeSuccess
	case errors.Is(err, record.ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, record.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, errForbidden):
		return CodeForbidden
	case errors.Is(err, record.ErrConflict), errors.As(err, new(*enrolment.WrongStatusError)), errors.Is(err, fleet.ErrRetired):
		return CodeConflict
	case errors.Is(err, record.ErrInvalid), errors.Is(err, enrolment.ErrFingerprintMismatch):
		return CodeBadInput
	}
	// gqlgen's own errors (parsing, validation, arguments) wrap nothing;
	// one that wraps an error of ours is classified by what it wraps.
	var gqlErr *gqlerror.Error
	if errors.As(err, &gqlErr) && gqlErr.Err == nil {
		if code, ok := gqlErr.Extensions["code"].(string); ok {
			return code
		}
		return CodeBadInput
	}
	return CodeInternal
}

// presentError gives known errors a stable code and a message fit for the
// caller, and everything else "internal error" (logged in full here).
func presentError(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		var inner *gqlerror.Error
		if errors.As(err, &inner) && inner.Err == nil {
			// Parse and validation errors, and argument errors: already
			// phrased for the caller.
			if gqlErr.Extensions == nil {
				gqlErr.Extensions = map[string]any{}
			}
			if _, ok := gqlErr.Extensions["code"]; !ok {
				gqlErr.Extensions["code"] = CodeBadInput
			}
			return gqlErr
		}
		code := errorCode(err)
		switch code {
		case CodeUnavailable:
			gqlErr.Message = "the database is unavailable; nothing changed: send the request again"
			markUnavailable(ctx)
		case CodeNotFound:
			gqlErr.Message = "not found"
		case CodeForbidden:
			gqlErr.Message = "forbidden"
		case CodeConflict:
			var ws *enrolment.WrongStatusError
			switch {
			case errors.As(err, &ws):
				gqlErr.Message = ws.Error()
			case errors.Is(err, fleet.ErrRetired):
				gqlErr.Message = fleet.ErrRetired.Error()
			default:
				gqlErr.Message = "conflict: " + trimStoreErr(err)
			}
		case CodeBadInput:
			var re *record.InputError
			if errors.Is(err, enrolment.ErrFingerprintMismatch) {
				gqlErr.Message = enrolment.ErrFingerprintMismatch.Error()
			} else if errors.As(err, &re) {
				gqlErr.Message = re.Msg
			} else {
				gqlErr.Message = "invalid input: " + trimStoreErr(err)
			}
		default:
			log.ErrorContext(ctx, "graphql resolver failed", "path", gqlErr.Path.String(), "err", err)
			gqlErr.Message = "internal error"
		}
		gqlErr.Extensions = map[string]any{"code": code}
		return gqlErr
	}
}

// trimStoreErr is the detail after the sentinel the store wrapped
// ("conflict: x" → x).
func trimStoreErr(err error) string {
	for _, sentinel := range []error{record.ErrConflict, record.ErrInvalid} {
		if errors.Is(err, sentinel) {
			msg := err.Error()
			if rest, ok := strings.CutPrefix(msg, sentinel.Error()+": "); ok {
				return rest
			}
			return msg
		}
	}
	return err.Error()
}

// writeJSONError answers outside GraphQL execution in GraphQL's error shape.
func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"errors": []map[string]any{{"message": msg, "extensions": map[string]any{"code": code}}},
	})
}
