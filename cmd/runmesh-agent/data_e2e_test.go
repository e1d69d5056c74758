package main_test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
	"github.com/runmesh/runmesh/internal/s3test"
)

// storageArgs gives runmesh-server dev a real S3 server's bucket.
func storageArgs(t *testing.T, s *s3test.Server) []string {
	creds, err := s.CredentialsFile(t.TempDir())
	require.NoError(t, err)
	return []string{"--storage-endpoint", s.Endpoint(), "--storage-bucket", s.Bucket, "--storage-region", s.Region, "--storage-credentials-file", creds}
}

func hexSHA(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// dataSubtests: a job reads two inputs and writes one output through URLs
// the server presigned, and the run attests them; a tampered URL, an expired
// one, an input past the claim and an output not written each fail the job,
// its own fault.
func dataSubtests(t *testing.T, sb sandbox, s3 *s3test.Server, submit func(string, []string, int, map[string]any) string,
	waitState func(string, time.Duration, ...string) map[string]any, image string,
) {
	ctx := context.Background()
	put := func(key, body string) {
		_, err := s3.Client.PutObject(ctx, s3.Bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		require.NoError(t, err)
	}
	a, b := "alpha\n", strings.Repeat("beta ", 20000)+"\n"
	put("in/a.txt", a)
	put("in/b.txt", b)
	inputs := func(ins ...map[string]any) map[string]any {
		return map[string]any{"inputs": ins, "maxAttempts": 1}
	}
	withData := func(extra map[string]any, dataMiB int) map[string]any {
		extra["claim"] = map[string]any{"cores": 0.5, "wallClockSeconds": 60, "dataMiB": dataMiB}
		return extra
	}
	job := withData(inputs(map[string]any{"name": "a.txt", "key": "in/a.txt"}, map[string]any{"name": "b.txt", "key": "in/b.txt"}), 1)
	job["outputs"] = []map[string]any{{"path": "/outputs/sum/all.txt", "key": "out/all.txt"}}
	id := submit(image, []string{"sh", "-c", "mkdir -p /outputs/sum && cat /inputs/a.txt /inputs/b.txt > /outputs/sum/all.txt && ! touch /inputs/x 2>/dev/null"}, 60, job)
	j := waitState(id, 90*time.Second, "SUCCEEDED", "FAILED")
	require.Equal(t, "SUCCEEDED", j["state"], j["stateReason"])
	obj, err := s3.Client.GetObject(ctx, s3.Bucket, "out/all.txt", minio.GetObjectOptions{})
	require.NoError(t, err)
	got, err := io.ReadAll(obj)
	require.NoError(t, err)
	require.Equal(t, a+b, string(got), "the output in the storage")
	run := j["runs"].([]any)[0].(map[string]any)
	ins := run["inputs"].([]any)
	require.Len(t, ins, 2)
	require.Equal(t, hexSHA(a), ins[0].(map[string]any)["sha256"])
	require.Equal(t, hexSHA(b), ins[1].(map[string]any)["sha256"])
	require.EqualValues(t, len(b), ins[1].(map[string]any)["size"])
	require.NotEmpty(t, ins[0].(map[string]any)["etag"])
	md := md5.Sum([]byte(a + b))
	require.Equal(t, []any{map[string]any{"key": "out/all.txt", "sha256": hexSHA(a + b), "size": float64(len(a + b)), "md5": hex.EncodeToString(md[:])}}, run["outputs"])

	fails := func(name string, extra map[string]any, cmd []string, says string) {
		t.Helper()
		j := waitState(submit(image, cmd, 60, extra), 90*time.Second, "FAILED", "SUCCEEDED")
		require.Equal(t, "FAILED", j["state"], name)
		require.Contains(t, j["stateReason"], says, name)
		require.NotContains(t, j["stateReason"], "host fault", name)
		t.Logf("%s: %s", name, j["stateReason"])
	}
	url := func(key string, valid time.Duration) string {
		u, err := s3.Client.PresignedGetObject(ctx, s3.Bucket, key, valid, nil)
		require.NoError(t, err)
		return u.String()
	}
	fails("a tampered URL", withData(inputs(map[string]any{"name": "t", "url": strings.Replace(url("in/a.txt", time.Minute), "a.txt", "b.txt", 1)}), 1),
		[]string{"true"}, "403")
	expired := url("in/a.txt", time.Second)
	time.Sleep(2 * time.Second) // the URL's lifetime passing is the condition
	fails("an expired URL", withData(inputs(map[string]any{"name": "e", "url": expired}), 1), []string{"true"}, "403")
	put("in/big.bin", strings.Repeat("x", 2<<20))
	fails("an input past claim.dataMiB", withData(inputs(map[string]any{"name": "big", "key": "in/big.bin"}), 1), []string{"true"}, "the job's claim has left")
	missing := withData(map[string]any{"maxAttempts": 1, "outputs": []map[string]any{{"path": "/outputs/none", "key": "out/none"}}}, 1)
	fails("an output not written", missing, []string{"true"}, "did not write it")
	past := withData(map[string]any{"maxAttempts": 1, "outputs": []map[string]any{{"path": "/outputs/2m", "key": "out/2m"}}}, 1)
	fails("outputs past claim.dataMiB", past, []string{"sh", "-c", "head -c 2097152 /dev/zero > /outputs/2m"}, "the job's claim has left")

	// kill -9 of the agent as the upload starts (the job's container has
	// just exited): the restarted agent adopts the ended unit and uploads
	// again; the object is whole, and the run attests all of it.
	const size = 256 << 20
	big := withData(map[string]any{"outputs": []map[string]any{{"path": "/outputs/big.bin", "key": "out/big.bin"}}}, 256)
	id = submit(image, []string{"sh", "-c", "head -c 268435456 /dev/zero > /outputs/big.bin"}, 120, big)
	unit := "runmesh-job-" + id + "-1.service"
	e2e.Eventually(t, 60*time.Second, "the job's container exited", func() bool {
		out, _ := sb.run("user", "systemctl", "--user", "show", "-p", "SubState", "--value", unit)
		return strings.TrimSpace(out) == "exited"
	})
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	sb.must("exec", "sh", "-c", "systemctl kill -s KILL runmesh-agent; systemctl reset-failed runmesh-agent; systemctl restart runmesh-agent")
	j = waitState(id, 120*time.Second, "SUCCEEDED", "FAILED")
	require.Equal(t, "SUCCEEDED", j["state"], j["stateReason"])
	info, err := s3.Client.StatObject(ctx, s3.Bucket, "out/big.bin", minio.StatObjectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, size, info.Size, "the object is whole")
	runs := j["runs"].([]any)
	require.EqualValues(t, size, runs[len(runs)-1].(map[string]any)["outputs"].([]any)[0].(map[string]any)["size"])
	journal := sb.must("exec", "journalctl", "-u", "runmesh-agent", "--since", since, "--no-pager", "-o", "cat")
	before, after, _ := strings.Cut(journal, "Starting runmesh-agent.service")
	t.Logf("kill -9 as the upload started: %d attempt(s); uploads finished by the killed agent %d, by the restarted one %d",
		len(runs), strings.Count(before, `"msg":"output uploaded"`), strings.Count(after, `"msg":"output uploaded"`))
}
