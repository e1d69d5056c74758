// Package s3test runs a real S3-compatible server for tests: versitygw
// (Apache-2.0), an S3 gateway that checks SigV4 signatures, presigned URLs
// among them, on its POSIX backend. It is built once per machine with `go
// install` into the user's cache, as the step CLI is, and listens on
// loopback with credentials made for the run.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the versitygw the tests run.
const Version = "v1.8.0"

// Server is a running versitygw with one bucket.
type Server struct {
	Addr      string // host:port, plain HTTP
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string
	// Dir is the POSIX backend's root: Dir/Bucket/KEY is an object's data.
	Dir string
	// Client is signed with the server's credentials.
	Client *minio.Client
}

// CredentialsFile writes the server's credentials in AWS's shared format
// (what storage.credentials_file names) into dir, mode 0600.
func (s *Server) CredentialsFile(dir string) (string, error) {
	path := filepath.Join(dir, "s3-credentials")
	body := "[default]\naws_access_key_id = " + s.AccessKey + "\naws_secret_access_key = " + s.SecretKey + "\n"
	return path, os.WriteFile(path, []byte(body), 0o600)
}

// Endpoint is the server's URL.
func (s *Server) Endpoint() string { return "http://" + s.Addr }

var buildMu sync.Mutex

// Binary returns versitygw, building it into the user's cache on first use
// (a few minutes, once per machine).
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := Build(func(msg string) { t.Log(msg) })
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Build is Binary for a program: it says what it does through logf.
func Build(logf func(string)) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "runmesh-tools", "versitygw-"+Version)
	bin := filepath.Join(dir, "versitygw")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Test binaries of several packages may ask at once: one builds.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	logf(fmt.Sprintf("building versitygw %s into %s (once per machine)", Version, dir))
	cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+Version)
	cmd.Dir = os.TempDir() // outside our module: exactly that version
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install versitygw: %v\n%s", err, out)
	}
	return bin, nil
}

// Start runs a server for the test's life, with a bucket named bucket.
func Start(t testing.TB, bucket string) *Server {
	t.Helper()
	logf := func(msg string) { t.Log(msg) }
	bin, err := Build(logf)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "versitygw.log")
	s, stop, err := Run(bin, bucket, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			if b, err := os.ReadFile(log); err == nil {
				t.Logf("versitygw:\n%s", b)
			}
		}
	})
	return s
}

// Run starts versitygw bin on loopback over dir, with a bucket named
// bucket and its output in logFile; stop ends it.
func Run(bin, bucket, dir, logFile string) (s *Server, stop func(), err error) {
	s = &Server{Region: "us-east-1", AccessKey: "rmtest" + token(6), SecretKey: token(20), Bucket: bucket, Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	s.Addr = ln.Addr().String()
	ln.Close()
	log, err := os.Create(logFile)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "--port", s.Addr, "--region", s.Region, "posix", s.Dir)
	// The credentials by environment, not on the command line.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = log, log
	// It goes with the test binary even when that dies without its
	// cleanup (a panic, a -timeout, a mutant stopped).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	}
	s.Client, err = minio.New(s.Addr, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region})
	if err != nil {
		stop()
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		err = s.Client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: s.Region})
		if err == nil {
			return s, stop, nil
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, nil, fmt.Errorf("versitygw at %s: the bucket: %w", s.Addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func token(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
