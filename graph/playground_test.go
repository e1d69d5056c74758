package graph_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/graph"
)

// Loads from another origin (a scheme-relative // among them), in the
// page and in the bundle. Links a user may follow (GraphiQL's logo, its
// shortcut docs) are no loads, so href counts in the page only.
var (
	externalInPage   = regexp.MustCompile(`(?i)\b(src|href|action)\s*=\s*["']?\s*(https?:)?//`)
	externalInScript = regexp.MustCompile(`(?i)(\bsrc\s*[=:]\s*|importScripts\(\s*|import\(\s*|url\(\s*)["'\x60]?\s*(https?:)?//`)
	externalInStyle  = regexp.MustCompile(`(?i)@import|url\(\s*["']?\s*(https?:)?//`)
)

func getPlayground(t *testing.T, h http.Handler, target, encoding string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The page and its two files are served from the binary, with nothing
// fetched from elsewhere (fleets are often offline) and a policy that
// would refuse it if it were.
func TestPlaygroundIsSelfContained(t *testing.T) {
	t.Parallel()
	h := graph.PlaygroundHandler("/graphql")
	for _, page := range []string{"/playground", "/playground/"} {
		rec := getPlayground(t, h, page, "")
		require.Equal(t, http.StatusOK, rec.Code, page)
		body := rec.Body.String()
		require.Contains(t, body, `data-endpoint="/graphql"`)
		require.NotRegexp(t, externalInPage, body, "external resource in the page")
		requirePlaygroundHeaders(t, rec.Header())
		require.Equal(t, "no-cache", rec.Header().Get("Cache-Control"), "an upgraded server's page is asked for again")

		js := regexp.MustCompile(`<script defer src="([^"]+\.min\.js)"></script>`).FindStringSubmatch(body)
		css := regexp.MustCompile(`<link rel="stylesheet" href="([^"]+\.min\.css)">`).FindStringSubmatch(body)
		require.Len(t, js, 2, body)
		require.Len(t, css, 2, body)
		script := getAsset(t, h, page, js[1], "text/javascript; charset=utf-8")
		require.NotRegexp(t, externalInScript, script, "the script loads from elsewhere")
		require.Contains(t, script, "graphql-transport-ws", "graphql-ws is in the bundle")
		style := getAsset(t, h, page, css[1], "text/css; charset=utf-8")
		require.NotRegexp(t, externalInStyle, style, "the stylesheet loads from elsewhere")
		require.Contains(t, style, ".graphiql-container")
	}
	require.Equal(t, http.StatusNotFound, getPlayground(t, h, "/playground/graphiql-0.0.0.min.js", "").Code)
}

// getAsset fetches ref as the page at page would, plain and gzipped, and
// returns its body.
func getAsset(t *testing.T, h http.Handler, page, ref, contentType string) string {
	t.Helper()
	base, err := url.Parse(page)
	require.NoError(t, err)
	target := base.ResolveReference(&url.URL{Path: ref}).Path
	require.True(t, strings.HasPrefix(target, "/playground/"), "%s from %s is %s", ref, page, target)
	rec := getPlayground(t, h, target, "")
	require.Equal(t, http.StatusOK, rec.Code, target)
	require.Equal(t, contentType, rec.Header().Get("Content-Type"))
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	require.Equal(t, "public, max-age=31536000, immutable", rec.Header().Get("Cache-Control"), "the name carries the version")
	require.Empty(t, rec.Header().Get("Content-Encoding"))

	zipped := getPlayground(t, h, target, "br, gzip;q=0.9")
	require.Equal(t, "gzip", zipped.Header().Get("Content-Encoding"))
	z, err := gzip.NewReader(bytes.NewReader(zipped.Body.Bytes()))
	require.NoError(t, err)
	unzipped, err := io.ReadAll(z)
	require.NoError(t, err)
	require.Equal(t, rec.Body.String(), string(unzipped))
	require.Less(t, zipped.Body.Len(), rec.Body.Len())
	return rec.Body.String()
}

// requirePlaygroundHeaders checks the page's policy: every source of it
// this origin or data:, no inline or eval'd script, no framing.
func requirePlaygroundHeaders(t *testing.T, h http.Header) {
	t.Helper()
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	require.Equal(t, "no-referrer", h.Get("Referrer-Policy"))
	csp := h.Get("Content-Security-Policy")
	directives := map[string][]string{}
	for _, d := range strings.Split(csp, ";") {
		fields := strings.Fields(d)
		require.NotEmpty(t, fields, "an empty directive in %q", csp)
		directives[fields[0]] = fields[1:]
		for _, source := range fields[1:] {
			require.Contains(t, []string{"'none'", "'self'", "'unsafe-inline'", "data:"}, source, "%s in %s", source, fields[0])
		}
	}
	require.Equal(t, []string{"'none'"}, directives["default-src"])
	require.Equal(t, []string{"'self'"}, directives["script-src"], "no inline script, no eval")
	require.Equal(t, []string{"'self'"}, directives["connect-src"])
	require.Equal(t, []string{"'none'"}, directives["frame-ancestors"])
	require.Equal(t, []string{"'none'"}, directives["base-uri"])
}
