package graph_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/graph"
)

func TestPlaygroundIsSelfContained(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	graph.PlaygroundHandler("/graphql").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/playground", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	require.Contains(t, body, `"/graphql"`)
	require.NotContains(t, body, "{{ENDPOINT}}")
	// Nothing is fetched from elsewhere: fleets are often offline.
	require.False(t, regexp.MustCompile(`(src|href)\s*=\s*["']?(https?:)?//`).MatchString(body), "external resource in the page")
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "connect-src 'self'")
}
