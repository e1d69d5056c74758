package graph_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/graph"
)

// chromiumPath is Debian's chromium, which make test installs where it is
// missing (scripts/ensure-chromium.sh).
const chromiumPath = "/usr/bin/chromium"

// GraphiQL, as an administrator uses it, against the real admin API in
// headless Chromium: the token entered once, a query over HTTP, a
// subscription over the websocket, the schema's docs; and not one request
// to another host, nor one refusal by the page's policy.
func TestBrowserPlayground(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	b := setup(t)
	r := b.do(t, b.platform, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, map[string]any{"in": map[string]any{
		"poolId": b.poolA.ID, "image": "busybox", "command": []string{"true"}, "claim": map[string]any{"cores": 1, "wallClockSeconds": 60}}})
	require.Empty(t, r.Errors, r.Raw)
	jobID := dig(r.Data, "submitJob", "id").(string)

	mux := http.NewServeMux()
	mux.Handle("/graphql", b.handler)
	playground := graph.PlaygroundHandler("/graphql")
	mux.Handle("GET /playground", playground)
	mux.Handle("GET /playground/", playground)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	p := openPage(ctx, t, startChromium(ctx, t))
	p.call("Page.navigate", map[string]any{"url": srv.URL + "/playground"}, nil)
	p.typeInto(`document.querySelector("#runmesh-token")`, b.platform)
	p.click("the token's Use button", `document.querySelector(".runmesh-token button[type=submit]")`)

	p.run(`{ viewer { role } }`, "PLATFORM_ADMIN")
	p.run(fmt.Sprintf(`subscription { jobEvents(jobId: %q) { type } }`, jobID), "SUBMITTED")
	p.showDocs("Job", "stdio", "idleTimeoutSeconds", "sessions")
	t.Logf("screenshot: %s", p.screenshot("playground.png"))
	// A dialog injects a <style> element: what style-src 'unsafe-inline'
	// is for.
	p.click("the settings button", `document.querySelector('[aria-label="Open settings dialog"]')`)
	p.waitFor("the settings dialog", `!!document.querySelector('[role="dialog"]')`)

	// Entered once: a reload keeps it, in this tab's sessionStorage, and
	// what GraphiQL keeps for longer does not hold it.
	p.call("Page.reload", nil, nil)
	p.waitFor("GraphiQL, not asking for the token again", `!!document.querySelector(".graphiql-query-editor") && !document.querySelector("#runmesh-token")`)
	kept, err := p.tryEval(ctx, `JSON.stringify(localStorage)`)
	require.NoError(t, err)
	require.NotContains(t, string(kept), b.platform)

	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	require.Empty(t, p.log.problems, "errors in the page, or refusals by its policy")
	requireOnlyTo(t, p.log, strings.TrimPrefix(srv.URL, "http://"), b.platform)
}

// requireOnlyTo checks that the page asked host alone, over HTTP and one
// websocket, with the token in the Authorization header and the socket's
// connection_init, never in a URL.
func requireOnlyTo(t *testing.T, log *pageLog, host, token string) {
	t.Helper()
	var sockets, posts int
	for _, req := range log.requests {
		u, err := url.Parse(req.url)
		require.NoError(t, err)
		switch u.Scheme {
		case "data", "about": // in the page, no request
			continue
		case "http", "ws":
		default:
			t.Errorf("a request of scheme %s: %s", u.Scheme, req.url)
		}
		require.Equal(t, host, u.Host, "a request left the machine: %s", req.url)
		require.NotContains(t, req.url, token, "the token is never in a URL")
		if u.Scheme == "ws" {
			sockets++
		}
		if req.method == http.MethodPost && u.Path == "/graphql" {
			posts++
			require.Equal(t, "Bearer "+token, req.authorization, "%s %s", req.method, req.url)
		}
	}
	require.Equal(t, 1, sockets, "the subscription went over a websocket")
	require.GreaterOrEqual(t, posts, 2, "introspection and the query went over HTTP")
	require.Contains(t, strings.Join(log.sentFrames, "\n"),
		fmt.Sprintf(`{"type":"connection_init","payload":{"Authorization":"Bearer %s"}}`, token))
}

// requireChromium skips without chromium, unless under CI, where tests
// must not pass by not running.
func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("%s is missing: scripts/ensure-chromium.sh installs it (under CI this test fails instead)", chromiumPath)
		}
		t.Fatalf("%s is missing under CI: make test installs it (scripts/ensure-chromium.sh): %v", chromiumPath, err)
	}
}

// A request the page made, as DevTools saw it.
type pageRequest struct {
	method, url, authorization string
}

// pageLog is what the page did: every request (websockets among them),
// what it sent on its websockets, its exceptions, console errors and what
// its policy refused.
type pageLog struct {
	mu         sync.Mutex
	requests   []pageRequest
	sentFrames []string
	problems   []string
}

func (l *pageLog) event(method string, params json.RawMessage) {
	var e struct {
		URL     string `json:"url"`
		Request struct {
			URL     string            `json:"url"`
			Method  string            `json:"method"`
			Headers map[string]string `json:"headers"`
		} `json:"request"`
		Response struct {
			PayloadData string `json:"payloadData"`
		} `json:"response"`
		ExceptionDetails struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
		Type    string            `json:"type"`
		Payload string            `json:"payload"`
		Args    []json.RawMessage `json:"args"`
	}
	_ = json.Unmarshal(params, &e)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch method {
	case "Network.requestWillBeSent":
		l.requests = append(l.requests, pageRequest{method: e.Request.Method, url: e.Request.URL, authorization: e.Request.Headers["Authorization"]})
	case "Network.webSocketCreated":
		l.requests = append(l.requests, pageRequest{method: "WEBSOCKET", url: e.URL})
	case "Network.webSocketFrameSent":
		l.sentFrames = append(l.sentFrames, e.Response.PayloadData)
	case "Runtime.exceptionThrown":
		l.problems = append(l.problems, fmt.Sprintf("exception: %s %s", e.ExceptionDetails.Text, e.ExceptionDetails.Exception.Description))
	case "Runtime.bindingCalled":
		l.problems = append(l.problems, "the page's policy refused "+e.Payload)
	case "Runtime.consoleAPICalled":
		if e.Type == "error" {
			l.problems = append(l.problems, fmt.Sprintf("console.error: %s", e.Args))
		}
	}
}

// page is one tab under DevTools, its calls bounded by ctx.
type page struct {
	t   *testing.T
	ctx context.Context
	c   *cdpConn
	log *pageLog
}

// openPage opens a tab of the browser at devtools and starts recording
// what it does.
func openPage(ctx context.Context, t *testing.T, devtools string) *page {
	t.Helper()
	browser, err := dialCDP(ctx, devtools, nil)
	require.NoError(t, err)
	t.Cleanup(browser.close)
	var target struct {
		TargetID string `json:"targetId"`
	}
	require.NoError(t, browser.call(ctx, "Target.createTarget", map[string]any{"url": "about:blank"}, &target))
	u, err := url.Parse(devtools)
	require.NoError(t, err)
	log := &pageLog{}
	c, err := dialCDP(ctx, fmt.Sprintf("ws://%s/devtools/page/%s", u.Host, target.TargetID), log.event)
	require.NoError(t, err)
	t.Cleanup(c.close)
	p := &page{t: t, ctx: ctx, c: c, log: log}
	for _, domain := range []string{"Page.enable", "Network.enable", "Runtime.enable"} {
		p.call(domain, nil, nil)
	}
	// Each document reports what its policy refused through a binding,
	// which outlives a reload.
	p.call("Runtime.addBinding", map[string]any{"name": "runmeshRefused"}, nil)
	p.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `document.addEventListener("securitypolicyviolation",
		(e) => runmeshRefused(e.violatedDirective + " " + e.blockedURI));`}, nil)
	return p
}

func (p *page) call(method string, params, result any) {
	p.t.Helper()
	require.NoError(p.t, p.c.call(p.ctx, method, params, result))
}

// tryEval is the JSON of expr's value in the page.
func (p *page) tryEval(ctx context.Context, expr string) (json.RawMessage, error) {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := p.c.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return nil, err
	}
	if r.ExceptionDetails != nil {
		return nil, fmt.Errorf("%s: %s", expr, r.ExceptionDetails.Text)
	}
	return r.Result.Value, nil
}

// waitFor polls expr until it is truthy, and returns its JSON.
func (p *page) waitFor(what, expr string) json.RawMessage {
	p.t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := p.tryEval(p.ctx, expr)
		if p.ctx.Err() != nil {
			// Out of time: say what the page shows, in a moment more.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			shows, err := p.tryEval(ctx, `document.body.innerText`)
			if err != nil {
				shows = []byte(err.Error())
			}
			p.t.Fatalf("waiting for %s: %v; the page shows:\n%.2000s", what, p.ctx.Err(), shows)
		}
		if err != nil {
			// The page navigating (a reload) ends the context an
			// evaluation ran in: ask again in the next one.
			v = nil
		}
		switch string(v) {
		case "", "null", "false", `""`, "0":
		default:
			return v
		}
		select {
		case <-p.ctx.Done():
		case <-tick.C:
		}
	}
}

// click presses the mouse at the middle of the element elem finds, as a
// user would.
func (p *page) click(what, elem string) {
	p.t.Helper()
	var at struct{ X, Y float64 }
	box := p.waitFor(what, fmt.Sprintf(`(() => { const e = %s; if (!e) return null;
		const r = e.getBoundingClientRect(); return r.width > 0 && {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()`, elem))
	require.NoError(p.t, json.Unmarshal(box, &at))
	for _, kind := range []string{"mouseMoved", "mousePressed", "mouseReleased"} {
		p.call("Input.dispatchMouseEvent", map[string]any{"type": kind, "x": at.X, "y": at.Y, "button": "left", "clickCount": 1}, nil)
	}
}

// typeInto focuses the input elem finds and types text into it.
func (p *page) typeInto(elem, text string) {
	p.t.Helper()
	p.waitFor(elem, fmt.Sprintf(`(() => { const e = %s; return !!e && (e.focus(), document.activeElement === e); })()`, elem))
	p.call("Input.insertText", map[string]any{"text": text}, nil)
}

// run puts query in GraphiQL's editor, runs it with the run button, and
// waits for the result pane to show want.
func (p *page) run(query, want string) {
	p.t.Helper()
	q, _ := json.Marshal(query)
	const editor = `document.querySelector(".graphiql-query-editor .CodeMirror")`
	p.waitFor("the query editor", fmt.Sprintf(`(() => { const e = %s; return !!e && (e.CodeMirror.setValue(%s), true); })()`, editor, q))
	// GraphiQL parses an edit a moment later, and picks HTTP or the
	// websocket by what it parsed last: run once it has this query.
	p.waitFor("GraphiQL to parse the query", fmt.Sprintf(`%s.CodeMirror.documentAST?.loc?.source.body === %s`, editor, q))
	p.click("the run button", `document.querySelector(".graphiql-execute-button")`)
	w, _ := json.Marshal(want)
	p.waitFor(want+" in the result pane", fmt.Sprintf(`(() => { const e = document.querySelector(".graphiql-response .result-window");
		return !!e && e.innerText.includes(%s); })()`, w))
}

// showDocs opens the documentation explorer, finds typeName by its search
// and waits for each of fields among the type's fields.
func (p *page) showDocs(typeName string, fields ...string) {
	p.t.Helper()
	p.click("the docs button", `document.querySelector('[aria-label="Show Documentation Explorer"]')`)
	p.waitFor("the schema's root types", `!!document.querySelector(".graphiql-doc-explorer-root-type")`)
	p.typeInto(`document.querySelector('[data-cy="doc-explorer-input"]')`, typeName)
	name, _ := json.Marshal(typeName)
	p.click(typeName+" among the search results", fmt.Sprintf(`[...document.querySelectorAll('[data-cy="doc-explorer-list"] [role="option"]')]
		.find((e) => e.innerText.trim() === %s)`, name))
	for _, field := range fields {
		f, _ := json.Marshal(field)
		p.waitFor(typeName+"'s "+field, fmt.Sprintf(`(() => {
		const title = document.querySelector(".graphiql-doc-explorer-title");
		return !!title && title.innerText.trim() === %s &&
			[...document.querySelectorAll(".graphiql-doc-explorer-content .graphiql-doc-explorer-field-name")].some((e) => e.innerText === %s); })()`, name, f))
	}
}

// screenshot saves the page as name in $RUNMESH_ARTIFACTS, or in a
// directory of the test's, and returns its path.
func (p *page) screenshot(name string) string {
	p.t.Helper()
	dir := os.Getenv("RUNMESH_ARTIFACTS")
	if dir == "" {
		dir = p.t.TempDir()
	}
	require.NoError(p.t, os.MkdirAll(dir, 0o755))
	var shot struct {
		Data string `json:"data"`
	}
	p.call("Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(p.t, err)
	path := filepath.Join(dir, name)
	require.NoError(p.t, os.WriteFile(path, png, 0o644))
	return path
}

// cdpConn is one DevTools websocket: calls matched to their answers by id,
// events handed to onEvent in the order they come.
type cdpConn struct {
	ws      *websocket.Conn
	onEvent func(method string, params json.RawMessage)
	done    chan struct{}
	mu      sync.Mutex // guards next and waiting
	next    int64
	waiting map[int64]chan cdpMessage
}

type cdpMessage struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func dialCDP(ctx context.Context, addr string, onEvent func(string, json.RawMessage)) (*cdpConn, error) {
	ws, _, err := websocket.Dial(ctx, addr, nil)
	if err != nil {
		return nil, fmt.Errorf("dial devtools %s: %w", addr, err)
	}
	ws.SetReadLimit(64 << 20) // a screenshot comes in one message
	c := &cdpConn{ws: ws, onEvent: onEvent, done: make(chan struct{}), waiting: map[int64]chan cdpMessage{}}
	go c.read()
	return c, nil
}

// read runs until the connection closes (close, or chromium gone), not
// until the test's time is out: a test out of time still asks the page
// what it shows.
func (c *cdpConn) read() {
	defer close(c.done)
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		if m.ID == 0 {
			if c.onEvent != nil {
				c.onEvent(m.Method, m.Params)
			}
			continue
		}
		c.mu.Lock()
		answer := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		c.mu.Unlock()
		if answer != nil {
			answer <- m
		}
	}
}

func (c *cdpConn) call(ctx context.Context, method string, params, result any) error {
	if params == nil {
		params = map[string]any{}
	}
	answer := make(chan cdpMessage, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.waiting[id] = answer
	c.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-answer:
		if m.Error != nil {
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-c.done:
		return fmt.Errorf("%s: devtools connection closed", method)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (c *cdpConn) close() {
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	<-c.done
}
