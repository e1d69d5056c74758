package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/runnerapi"
)

func hashOf(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// storageStub serves GET /in/NAME from files and takes PUT /out/KEY.
type storageStub struct {
	mu  sync.Mutex
	put map[string]string
}

func (s *storageStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/in/"):
		w.Header().Set("ETag", `"e1"`)
		io.WriteString(w, "input "+strings.TrimPrefix(r.URL.Path, "/in/"))
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/out/"):
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.put[strings.TrimPrefix(r.URL.Path, "/out/")] = string(b)
		s.mu.Unlock()
	default:
		http.NotFound(w, r)
	}
}

// A job's inputs are in place before its unit starts; its outputs are
// uploaded after it exited 0, and its data goes with it. An output it did
// not write makes the attempt a failure of its own.
func TestAJobsDataMoves(t *testing.T) {
	t.Parallel()
	stub := &storageStub{put: map[string]string{}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	sys := runtimetest.New(t)
	r := newRuntime(t, sys, &fakeConn{})
	withData := func(id string) runnerapi.Lease {
		l := lease(id)
		l.DataMiB = 1
		l.Inputs = []runnerapi.LeaseInput{{Name: "a.csv", Key: "sets/a.csv", URL: srv.URL + "/in/a.csv"}}
		l.Outputs = []runnerapi.LeaseOutput{{Path: "/outputs/r/result.txt", Key: "res/" + id, URL: srv.URL + "/out/res/" + id}}
		return l
	}
	const ok, missing = "dddddddd-0000-4000-8000-000000000001", "dddddddd-0000-4000-8000-000000000002"
	jok, okDone := launch(t, r, withData(ok))
	jmissing, missingDone := launch(t, r, withData(missing))
	p, q := sys.Host().Paths(ok, 1), sys.Host().Paths(missing, 1)
	if !sys.Has(p.Unit) || !sys.Has(q.Unit) {
		t.Fatal("launched without their units")
	}
	if b, err := os.ReadFile(filepath.Join(p.Inputs, "a.csv")); err != nil || string(b) != "input a.csv" {
		t.Fatalf("the input when the unit started: %q, %v", b, err)
	}
	if st, err := os.Stat(p.Outputs); err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("outputs directory: %v, %v", st, err)
	}
	os.MkdirAll(filepath.Join(p.Outputs, "r"), 0o755)
	os.WriteFile(filepath.Join(p.Outputs, "r", "result.txt"), []byte("42\n"), 0o644)
	sys.End(p.Unit, 0)
	sys.End(q.Unit, 0)
	f := ended(t, okDone)
	r0 := f.res
	if f.how != runtime.Finished || r0.ExitCode == nil || *r0.ExitCode != 0 || r0.ReturnReason != nil {
		t.Fatalf("followed to %v, result %+v", f.how, r0)
	}
	// The result attests what moved.
	if len(r0.Inputs) != 1 || r0.Inputs[0].Name != "a.csv" || r0.Inputs[0].Key != "sets/a.csv" || r0.Inputs[0].ETag != "e1" ||
		r0.Inputs[0].SHA256 != hashOf("input a.csv") || r0.Inputs[0].Size != int64(len("input a.csv")) {
		t.Fatalf("inputs attested: %+v", r0.Inputs)
	}
	if len(r0.Outputs) != 1 || r0.Outputs[0].Key != "res/"+ok || r0.Outputs[0].SHA256 != hashOf("42\n") || r0.Outputs[0].Size != 3 || len(r0.Outputs[0].MD5) != 32 {
		t.Fatalf("outputs attested: %+v", r0.Outputs)
	}
	stub.mu.Lock()
	got := stub.put["res/"+ok]
	stub.mu.Unlock()
	if got != "42\n" {
		t.Fatalf("uploaded %q", got)
	}
	res := ended(t, missingDone).res
	if res.ExitCode != nil || res.ReturnReason == nil || !strings.Contains(*res.ReturnReason, "did not write it") || res.HostFault {
		t.Fatalf("a missing output: %+v", res)
	}
	jok.End(context.Background())
	jmissing.End(context.Background())
	_, e1 := os.Stat(p.Data)
	_, e2 := os.Stat(q.Data)
	if !os.IsNotExist(e1) || !os.IsNotExist(e2) {
		t.Fatalf("the data outlived End: %v, %v", e1, e2)
	}
}

// An input the storage refuses is the job's fault, and no unit starts.
func TestARefusedInputStartsNothing(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "signature does not match", http.StatusForbidden)
	}))
	defer srv.Close()
	const id = "dddddddd-0000-4000-8000-000000000003"
	sys := runtimetest.New(t)
	l := lease(id)
	l.DataMiB = 1
	l.Inputs = []runnerapi.LeaseInput{{Name: "a", URL: srv.URL + "/a?X-Amz-Signature=x"}}
	res, ok := newRuntime(t, sys, &fakeConn{}).Take(l, nil).Launch(context.Background(), nil)
	if ok || res.ReturnReason == nil || !strings.Contains(*res.ReturnReason, "403") || res.HostFault {
		t.Fatalf("launched %v: %+v", ok, res)
	}
	if sys.Has(sys.Host().Paths(id, 1).Unit) {
		t.Fatal("a unit started without its input")
	}
}
