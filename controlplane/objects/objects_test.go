package objects_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/internal/s3test"
	"github.com/runmesh/runmesh/internal/testutil"
)

func open(t *testing.T, s *s3test.Server) *objects.Bucket {
	t.Helper()
	creds, err := s.CredentialsFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := objects.Open(objects.Config{Endpoint: s.Endpoint(), Bucket: s.Bucket, Region: s.Region, CredentialsFile: creds})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func do(t *testing.T, method, url string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Presigned URLs against a real S3 server that checks their signatures:
// a PUT and a GET work as given; the server's HEAD sees the object's size
// and its MD5 as the ETag; a URL changed by one character, or past its
// time, is refused and writes nothing.
func TestPresignedURLs(t *testing.T) {
	s := s3test.Start(t, "runmesh-test")
	st := open(t, s)
	ctx := context.Background()
	if o := st.Origin(); o.Scheme != "http" || o.Host != "127.0.0.1" || o.Port == 0 {
		t.Fatalf("origin %+v", o)
	}

	const key, data = "jobs/42/out/result.txt", "hello from a job\n"
	put, err := st.PresignPut(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, http.MethodPut, put, data); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	obj, err := st.Stat(ctx, key)
	sum := md5.Sum([]byte(data))
	if err != nil || obj.Size != int64(len(data)) || obj.ETag != hex.EncodeToString(sum[:]) {
		t.Fatalf("stat: %+v, %v", obj, err)
	}
	get, err := st.PresignGet(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, http.MethodGet, get, ""); code != http.StatusOK || body != data {
		t.Fatalf("GET: %d %q", code, body)
	}

	// Tampered: another key under the same signature.
	other := strings.Replace(put, "result.txt", "resulx.txt", 1)
	if code, _ := do(t, http.MethodPut, other, data); code != http.StatusForbidden {
		t.Fatalf("PUT with a changed key: %d, want 403", code)
	}
	if _, err := st.Stat(ctx, "jobs/42/out/resulx.txt"); !errors.Is(err, objects.ErrNoObject) {
		t.Fatalf("the refused PUT wrote an object: %v", err)
	}
	// The GET URL does not write.
	if code, _ := do(t, http.MethodPut, get, "overwritten"); code != http.StatusForbidden {
		t.Fatalf("PUT through a GET URL: %d, want 403", code)
	}
	// Expired.
	short, err := st.PresignGet(ctx, key, 2*time.Second) // signed at a whole second: 1 to 2 s
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, http.MethodGet, short, ""); code != http.StatusOK {
		t.Fatalf("GET within its time: %d, want 200", code)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, _ := do(t, http.MethodGet, short, "")
		return code == http.StatusForbidden
	}, "GET past its time refused (403)")
	if _, err := st.Stat(ctx, "absent"); !errors.Is(err, objects.ErrNoObject) {
		t.Fatalf("stat of an absent key: %v", err)
	}
}

func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	good := objects.Config{Endpoint: "https://s3.example.com", Bucket: "b", CredentialsFile: "/etc/runmesh/s3"}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*objects.Config){
		"not a URL":         func(c *objects.Config) { c.Endpoint = "s3.example.com" },
		"ftp":               func(c *objects.Config) { c.Endpoint = "ftp://s3.example.com" },
		"a path":            func(c *objects.Config) { c.Endpoint = "https://s3.example.com/bucket" },
		"user info":         func(c *objects.Config) { c.Endpoint = "https://key:secret@s3.example.com" },
		"http off loopback": func(c *objects.Config) { c.Endpoint = "http://s3.example.com" },
		"no bucket":         func(c *objects.Config) { c.Bucket = "" },
		"no credentials":    func(c *objects.Config) { c.CredentialsFile = "" },
	} {
		c := good
		mod(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := objects.Open(objects.Config{Endpoint: "http://127.0.0.1:9", Bucket: "b", CredentialsFile: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Error("opened without a credentials file")
	}
	open := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(open, []byte("[default]\naws_access_key_id = a\naws_secret_access_key = b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Open(objects.Config{Endpoint: "http://127.0.0.1:9", Bucket: "b", CredentialsFile: open}); err == nil || !strings.Contains(err.Error(), "readable by everyone") {
		t.Errorf("a world-readable credentials file: %v", err)
	}
	if err := os.Chmod(open, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Open(objects.Config{Endpoint: "http://127.0.0.1:9", Bucket: "b", CredentialsFile: open}); err != nil {
		t.Errorf("a 0640 credentials file: %v", err)
	}
}
