package graph

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
)

// playgroundDist is the GraphiQL bundle graph/playground/build.sh makes
// (make playground): one script and one stylesheet, named with GraphiQL's
// version, committed so that building the server needs no npm.
//
//go:embed playground/dist
var playgroundDist embed.FS

// PlaygroundCSP is the playground page's Content-Security-Policy: nothing
// from another origin, no inline script and no eval (GraphiQL needs
// neither). Inline styles are allowed because GraphiQL's dialogs inject
// <style> elements; under the other directives such a style can load
// nothing from elsewhere. Its fonts and lint icons are data: URLs in its
// stylesheet; connect-src 'self' covers the subscriptions' websocket.
// browser_test.go runs GraphiQL under it and fails on any refusal.
const PlaygroundCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"connect-src 'self'; img-src 'self' data:; font-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var playgroundTemplate = template.Must(template.New("playground").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>runmesh admin playground</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{{.Dir}}{{.CSS}}">
<script defer src="{{.Dir}}{{.JS}}"></script>
</head>
<body>
<div id="playground" data-endpoint="{{.Endpoint}}"></div>
<noscript>The playground is GraphiQL, which needs JavaScript.</noscript>
</body>
</html>
`))

// playgroundAsset is one file of the bundle, and its gzip form, made the
// first time a client asks for it.
type playgroundAsset struct {
	contentType string
	body        []byte
	gzipped     func() []byte
}

// PlaygroundHandler serves GraphiQL for endpoint: the page at the path it
// is mounted on (with or without a trailing slash) and its two files
// beside it, under the page's path: mount it at both "GET /playground"
// and "GET /playground/". Everything is embedded, so it works on hosts
// without internet access. The page itself needs no token; the queries it
// sends do.
func PlaygroundHandler(endpoint string) http.Handler {
	b := playgroundFiles()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := path.Base(r.URL.Path)
		switch {
		case strings.HasSuffix(r.URL.Path, "/"):
			servePlaygroundPage(w, "", b, endpoint)
		case b.assets[name] != nil:
			serveAsset(w, r, b.assets[name])
		case !strings.Contains(name, "."):
			// The page without its slash: its files are one level down.
			servePlaygroundPage(w, name+"/", b, endpoint)
		default:
			http.NotFound(w, r)
		}
	})
}

func servePlaygroundPage(w http.ResponseWriter, dir string, b *playgroundBundle, endpoint string) {
	var page bytes.Buffer
	if err := playgroundTemplate.Execute(&page, map[string]string{"Dir": dir, "JS": b.js, "CSS": b.css, "Endpoint": endpoint}); err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", PlaygroundCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The page names the files of this server's bundle: after an upgrade
	// a browser must ask again to learn the new names.
	h.Set("Cache-Control", "no-cache")
	w.Write(page.Bytes())
}

func serveAsset(w http.ResponseWriter, r *http.Request, a *playgroundAsset) {
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	// The name carries GraphiQL's version, and a new bundle a new name.
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Vary", "Accept-Encoding")
	body := a.body
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = a.gzipped()
	}
	w.Write(body)
}

func acceptsGzip(r *http.Request) bool {
	for _, e := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if name, _, _ := strings.Cut(strings.TrimSpace(e), ";"); name == "gzip" {
			return true
		}
	}
	return false
}

// playgroundBundle is the embedded bundle: its files by name, and the
// names of its script and stylesheet.
type playgroundBundle struct {
	assets  map[string]*playgroundAsset
	js, css string
}

// playgroundFiles reads the embedded bundle. One without exactly one
// script and one stylesheet is a broken build, refused at start.
var playgroundFiles = sync.OnceValue(func() *playgroundBundle {
	files, err := fs.Sub(playgroundDist, "playground/dist")
	if err != nil {
		panic(err)
	}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err)
	}
	assets := map[string]*playgroundAsset{}
	var js, css []string
	for _, e := range entries {
		body, err := fs.ReadFile(files, e.Name())
		if err != nil {
			panic(err)
		}
		a := &playgroundAsset{body: body, gzipped: sync.OnceValue(func() []byte { return gzipBytes(body) })}
		switch path.Ext(e.Name()) {
		case ".js":
			a.contentType = "text/javascript; charset=utf-8"
			js = append(js, e.Name())
		case ".css":
			a.contentType = "text/css; charset=utf-8"
			css = append(css, e.Name())
		default:
			continue
		}
		assets[e.Name()] = a
	}
	if len(js) != 1 || len(css) != 1 {
		panic(fmt.Sprintf("graph/playground/dist holds scripts %q and stylesheets %q, not one of each: run make playground", js, css))
	}
	return &playgroundBundle{assets: assets, js: js[0], css: css[0]}
})

func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	z, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	z.Write(b)
	z.Close()
	return out.Bytes()
}
