package runtime_test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/internal/s3test"
	"github.com/runmesh/runmesh/runnerapi"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func presign(t *testing.T, s *s3test.Server, method, key string, valid time.Duration) string {
	t.Helper()
	ctx := context.Background()
	var u interface{ String() string }
	var err error
	if method == http.MethodGet {
		u, err = s.Client.PresignedGetObject(ctx, s.Bucket, key, valid, nil)
	} else {
		u, err = s.Client.PresignedPutObject(ctx, s.Bucket, key, valid)
	}
	if err != nil {
		t.Fatal(err)
	}
	return u.String()
}

func fault(t *testing.T, err error, jobFault bool, contains string) {
	t.Helper()
	var e *runtime.DataError
	if !errors.As(err, &e) || e.JobFault != jobFault || !strings.Contains(e.Error(), contains) {
		t.Fatalf("error %v; want a %s fault saying %q", err, map[bool]string{true: "job's", false: "host's"}[jobFault], contains)
	}
}

// Inputs and outputs through presigned URLs of a real S3 server: fetched
// and uploaded exactly as given (a key that needs escaping included),
// hashed as they travel; each refusal classed.
func TestInputsAndOutputsThroughPresignedURLs(t *testing.T) {
	if os.Getenv("RUNMESH_SANDBOX") != "" {
		t.Skip("versitygw is built with the Go toolchain, which agent/sandbox lacks: make test runs this")
	}
	s := s3test.Start(t, "runmesh-data")
	ctx := context.Background()
	objects := map[string]string{"sets/one.csv": "a,b\n1,2\n", "sets/two words+plus.bin": strings.Repeat("x", 100000)}
	for k, v := range objects {
		if _, err := s.Client.PutObject(ctx, s.Bucket, k, strings.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m := &runtime.Mover{Tries: 2, Backoff: 10 * time.Millisecond}
	dir := filepath.Join(t.TempDir(), "inputs")
	ins := []runnerapi.LeaseInput{
		{Name: "one.csv", Key: "sets/one.csv", URL: presign(t, s, http.MethodGet, "sets/one.csv", time.Minute)},
		{Name: "two.bin", Key: "sets/two words+plus.bin", URL: presign(t, s, http.MethodGet, "sets/two words+plus.bin", time.Minute)},
	}
	budget := &runtime.Budget{Left: 1 << 20}
	recs, err := m.Fetch(ctx, ins, dir, budget)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range ins {
		want := objects[in.Key]
		got, _ := os.ReadFile(filepath.Join(dir, in.Name))
		if string(got) != want || recs[i].SHA256 != sha(want) || recs[i].Size != int64(len(want)) || recs[i].ETag == "" || recs[i].Key != in.Key {
			t.Fatalf("%s: record %+v, %d bytes on disk", in.Name, recs[i], len(got))
		}
	}
	if budget.Left != 1<<20-int64(len(objects["sets/one.csv"])+len(objects["sets/two words+plus.bin"])) {
		t.Fatalf("budget left %d", budget.Left)
	}

	// Refusals: each the job's, and none retried.
	get := presign(t, s, http.MethodGet, "sets/one.csv", time.Minute)
	for name, c := range map[string]struct {
		in     runnerapi.LeaseInput
		budget int64
		says   string
	}{
		"tampered":    {runnerapi.LeaseInput{Name: "t", URL: strings.Replace(get, "one.csv", "two.csv", 1)}, -1, "403"},
		"no such key": {runnerapi.LeaseInput{Name: "n", URL: presign(t, s, http.MethodGet, "sets/none", time.Minute)}, -1, "404"},
		"over budget": {runnerapi.LeaseInput{Name: "b", URL: get}, 4, "more than the 4"},
	} {
		_, err := m.Fetch(ctx, []runnerapi.LeaseInput{c.in}, t.TempDir(), &runtime.Budget{Left: c.budget})
		fault(t, err, true, c.says)
		t.Logf("%s: %v", name, err)
	}
	expiring := presign(t, s, http.MethodGet, "sets/one.csv", time.Second)
	time.Sleep(2 * time.Second)
	_, err = m.Fetch(ctx, []runnerapi.LeaseInput{{Name: "e", URL: expiring}}, t.TempDir(), &runtime.Budget{Left: -1})
	fault(t, err, true, "403")

	// Outputs: uploaded and seen by the storage with the same size and MD5.
	root := t.TempDir()
	const result = "42\n"
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "sub", "r.txt"), []byte(result), 0o644)
	outs := []runnerapi.LeaseOutput{{Path: "/outputs/sub/r.txt", Key: "results/r.txt", URL: presign(t, s, http.MethodPut, "results/r.txt", time.Minute)}}
	orecs, err := m.Upload(ctx, outs, root, &runtime.Budget{Left: 3})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Client.StatObject(ctx, s.Bucket, "results/r.txt", minio.StatObjectOptions{})
	md := md5.Sum([]byte(result))
	if err != nil || info.Size != 3 || strings.Trim(info.ETag, `"`) != orecs[0].MD5 || orecs[0].MD5 != hex.EncodeToString(md[:]) || orecs[0].SHA256 != sha(result) {
		t.Fatalf("uploaded %+v; the storage has %+v (%v)", orecs, info, err)
	}
	// Not written, or a link out of the directory: the job's.
	// Past the budget left: the job's, and nothing is sent.
	_, err = m.Upload(ctx, outs, root, &runtime.Budget{Left: 2})
	fault(t, err, true, "more than the 2")
	_, err = m.Upload(ctx, []runnerapi.LeaseOutput{{Path: "/outputs/none", Key: "k", URL: outs[0].URL}}, root, &runtime.Budget{Left: -1})
	fault(t, err, true, "did not write it")
	os.Symlink("/etc/passwd", filepath.Join(root, "link"))
	_, err = m.Upload(ctx, []runnerapi.LeaseOutput{{Path: "/outputs/link", Key: "k", URL: outs[0].URL}}, root, &runtime.Budget{Left: -1})
	fault(t, err, true, "symbolic link")
}

// The host's faults: storage that cannot be reached, a 5xx past the
// retries, a full disk; a 5xx that passes is retried through.
func TestTheHostsFaults(t *testing.T) {
	t.Parallel()
	m := &runtime.Mover{Tries: 3, Backoff: 10 * time.Millisecond}
	ctx := context.Background()
	_, err := m.Fetch(ctx, []runnerapi.LeaseInput{{Name: "a", URL: "http://127.0.0.1:1/a?X-Amz-Signature=1"}}, t.TempDir(), &runtime.Budget{Left: -1})
	fault(t, err, false, "storage unreachable")

	var calls atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "slow down", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("fine"))
	}))
	defer flaky.Close()
	dir := t.TempDir()
	recs, err := m.Fetch(ctx, []runnerapi.LeaseInput{{Name: "f", URL: flaky.URL + "/f"}}, dir, &runtime.Budget{Left: -1})
	if err != nil || recs[0].SHA256 != sha("fine") || calls.Load() != 3 {
		t.Fatalf("through two 503s: %+v, %v, %d calls", recs, err, calls.Load())
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer down.Close()
	_, err = m.Fetch(ctx, []runnerapi.LeaseInput{{Name: "d", URL: down.URL + "/d"}}, t.TempDir(), &runtime.Budget{Left: -1})
	fault(t, err, false, "3 tries")

	// A full disk: the input's file is /dev/full.
	full := t.TempDir()
	if err := os.Symlink("/dev/full", filepath.Join(full, "big")); err != nil {
		t.Fatal(err)
	}
	_, err = m.Fetch(ctx, []runnerapi.LeaseInput{{Name: "big", URL: flaky.URL + "/big"}}, full, &runtime.Budget{Left: -1})
	fault(t, err, false, "disk is full")
}

// A URL whose path Go would escape again is refused, not sent changed.
func TestAURLGoWouldChangeIsRefused(t *testing.T) {
	t.Parallel()
	m := &runtime.Mover{Tries: 1}
	_, err := m.Fetch(context.Background(), []runnerapi.LeaseInput{{Name: "a", URL: "https://data.example.com/a b?sig=1"}}, t.TempDir(), &runtime.Budget{Left: -1})
	fault(t, err, true, "cannot be sent exactly as given")
}

// The request carries the URL's path and query byte for byte, escapes Go
// would write otherwise ("%7E" for "~", lower-case hex) included: a
// signature over them must still match.
func TestTheURLIsSentExactlyAsGiven(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.RequestURI)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	const uri = "/bucket/%7Euser/a%2bb%2Fc.bin?X-Amz-Credential=AKID%2f20261203&X-Amz-Signature=ab%3D&empty="
	m := &runtime.Mover{Tries: 1}
	if _, err := m.Fetch(context.Background(), []runnerapi.LeaseInput{{Name: "x", URL: srv.URL + uri}}, t.TempDir(), &runtime.Budget{Left: -1}); err != nil {
		t.Fatal(err)
	}
	if got.Load() != uri {
		t.Fatalf("sent %q, given %q", got.Load(), uri)
	}
}
