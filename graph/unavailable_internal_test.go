package graph

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/runmesh/runmesh/controlplane/record"
)

// A resolver's error the database could not serve now is presented as
// UNAVAILABLE, and its answer is 503 with Retry-After instead of 200: the
// same retryable answer as a token that could not be checked.
func TestAnUnavailableDatabaseIsOneRetryableAnswer(t *testing.T) {
	t.Parallel()
	present := presentError(nil)
	h := answerShaping(1<<20, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := present(r.Context(), fmt.Errorf("list jobs: %w: 57P03", record.ErrUnavailable))
		if err.Extensions["code"] != CodeUnavailable {
			t.Errorf("code %v", err.Extensions["code"])
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"errors":[` + mustJSON(err) + `]}`))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/graphql", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("%d, Retry-After %q: %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}

	// Any other error leaves the answer a 200.
	h = answerShaping(1<<20, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = present(r.Context(), record.ErrNotFound)
		_, _ = w.Write([]byte(`{}`))
	}))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/graphql", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d for not found", rec.Code)
	}
}

func mustJSON(e *gqlerror.Error) string {
	b, _ := json.Marshal(e)
	return string(b)
}
