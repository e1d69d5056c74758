package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/runmesh/runmesh/agent/standalone"
	"github.com/runmesh/runmesh/internal/s3test"
)

// benchData measures the agent's data mover against curl on the same
// presigned URLs of a real S3 server (versitygw on loopback): a GET into a
// file (an input) and a PUT from one (an output), taking turns, each round
// a fresh URL. The mover hashes as it goes (SHA-256; MD5 too on upload);
// curl does not.
func benchData(ctx context.Context, rounds int, sizeMiB int64, out io.Writer) error {
	curl, err := exec.LookPath("curl")
	if err != nil {
		return errors.New("curl is needed (apt-get install curl)")
	}
	bin, err := s3test.Build(func(msg string) { fmt.Fprintln(out, msg) })
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "runmesh-bench-data-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s, stop, err := s3test.Run(bin, "bench", filepath.Join(dir, "s3"), filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return err
	}
	defer stop()
	src := filepath.Join(dir, "src.bin")
	if err := randomFile(src, sizeMiB<<20); err != nil {
		return err
	}
	if _, err := s.Client.FPutObject(ctx, s.Bucket, "in.bin", src, minio.PutObjectOptions{}); err != nil {
		return err
	}
	urls := func(key string) (get, put string, err error) {
		g, err := s.Client.PresignedGetObject(ctx, s.Bucket, "in.bin", time.Hour, nil)
		if err != nil {
			return "", "", err
		}
		p, err := s.Client.PresignedPutObject(ctx, s.Bucket, key, time.Hour)
		if err != nil {
			return "", "", err
		}
		return g.String(), p.String(), nil
	}
	var t [4][]time.Duration    // mover GET, curl GET, mover PUT, curl PUT
	for i := range rounds + 1 { // the first round warms caches and is not counted
		get, put, err := urls(fmt.Sprintf("out-%d.bin", i))
		if err != nil {
			return err
		}
		steps := []func() error{
			func() error { _, _, err := standalone.Fetch(ctx, get, filepath.Join(dir, "in-mover.bin")); return err },
			func() error { return runTool(ctx, curl, "-sSf", "-o", filepath.Join(dir, "in-curl.bin"), get) },
			func() error { _, _, err := standalone.Upload(ctx, put, src); return err },
			func() error { return runTool(ctx, curl, "-sSf", "-o", "/dev/null", "-T", src, put) },
		}
		for k, step := range steps {
			start := time.Now()
			if err := step(); err != nil {
				return fmt.Errorf("round %d, step %d: %w", i, k, err)
			}
			if i > 0 {
				t[k] = append(t[k], time.Since(start))
			}
		}
	}
	mibps := func(d time.Duration) float64 { return float64(sizeMiB) / d.Seconds() }
	p50 := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	fmt.Fprintf(out, "runmesh-bench data — %s, versitygw %s on loopback, %d MiB, n=%d (p50 of each)\n", machine(), s3test.Version, sizeMiB, rounds)
	for _, c := range []struct {
		what        string
		mover, curl time.Duration
	}{{"input fetch (GET into a file)", p50(t[0]), p50(t[1])}, {"output upload (PUT from a file)", p50(t[2]), p50(t[3])}} {
		ratio := mibps(c.mover) / mibps(c.curl)
		met := "met"
		if ratio < 0.9 {
			met = "NOT met"
		}
		fmt.Fprintf(out, "%-32s agent %7.0f MiB/s   curl %7.0f MiB/s   ratio %.2f (goal ≥ 0.9: %s)\n", c.what, mibps(c.mover), mibps(c.curl), ratio, met)
	}
	return nil
}

func runTool(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, out)
	}
	return nil
}

func randomFile(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
