package controlplane_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/internal/s3test"
	"github.com/runmesh/runmesh/runnerapi"
)

// withStorage gives the server a real S3 server's bucket.
func withStorage(t *testing.T, s *s3test.Server) func(*controlplane.Options) {
	creds, err := s.CredentialsFile(t.TempDir())
	require.NoError(t, err)
	st, err := objects.Open(objects.Config{Endpoint: s.Endpoint(), Bucket: s.Bucket, Region: s.Region, CredentialsFile: creds})
	require.NoError(t, err)
	return func(o *controlplane.Options) { o.Bucket = st }
}

// A job's inputs and outputs: checked when submitted (a refusal queues
// nothing), shown without a submitter URL's signature, and presigned when
// leased, for the storage's objects: the lease's GET reads the object, its
// PUT writes the output's key; a submitter's URL goes exactly as given.
func TestJobDataIsCheckedAndPresignedAtLease(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t, "runmesh-jobs")
	b := setup(t, withStorage(t, s3))
	_, c, _ := b.approvedRunner(t, measured(0))
	tok, code := b.gql(t, b.platform, `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { storageOrigins { scheme host port } } }`,
		map[string]any{"p": b.poolA.ID})
	require.Empty(t, code)
	host, port, _ := strings.Cut(s3.Addr, ":")
	portN, _ := strconv.Atoi(port)
	require.Equal(t, []any{map[string]any{"scheme": "http", "host": host, "port": float64(portN)}},
		tok["createEnrolmentToken"].(map[string]any)["storageOrigins"], "the origins a runner must reach")
	data := func(inputs, outputs []map[string]any) func(map[string]any) {
		return func(in map[string]any) {
			if inputs != nil {
				in["inputs"] = inputs
				in["claim"].(map[string]any)["dataMiB"] = 1
			}
			if outputs != nil {
				in["outputs"] = outputs
				in["claim"].(map[string]any)["dataMiB"] = 1
			}
		}
	}
	in := func(name, key, url string) map[string]any {
		m := map[string]any{"name": name}
		if key != "" {
			m["key"] = key
		}
		if url != "" {
			m["url"] = url
		}
		return m
	}
	out := func(path, key string) map[string]any { return map[string]any{"path": path, "key": key} }
	var heavy []map[string]any
	for i := range 64 {
		heavy = append(heavy, in(fmt.Sprintf("f%d", i), strings.Repeat("k", 300)+fmt.Sprint(i), ""))
	}
	before := b.count(t, "SELECT count(*) FROM jobs")
	for name, mod := range map[string]func(map[string]any){
		"an input with neither key nor url": data([]map[string]any{in("a", "", "")}, nil),
		"an input with both":                data([]map[string]any{in("a", "k", "https://example.com/a")}, nil),
		"a name with a slash":               data([]map[string]any{in("a/b", "k", "")}, nil),
		"a name given twice":                data([]map[string]any{in("a", "k1", ""), in("a", "k2", "")}, nil),
		"a key starting with /":             data([]map[string]any{in("a", "/k", "")}, nil),
		"a key with ..":                     data([]map[string]any{in("a", "x/../k", "")}, nil),
		"a plain http url":                  data([]map[string]any{in("a", "", "http://example.com/a")}, nil),
		"a url with user info":              data([]map[string]any{in("a", "", "https://u:p@example.com/a")}, nil),
		"an output outside /outputs":        data(nil, []map[string]any{out("/tmp/x", "k")}),
		"an output path with ..":            data(nil, []map[string]any{out("/outputs/../etc/x", "k")}),
		"/outputs itself":                   data(nil, []map[string]any{out("/outputs/", "k")}),
		"one key for two outputs":           data(nil, []map[string]any{out("/outputs/a", "k"), out("/outputs/b", "k")}),
		"more data than a lease may carry":  data(heavy, nil),
		"65 inputs":                         data(append(heavy[:64:64], in("extra", "k", "")), nil),
		"inputs without claim.dataMiB": func(m map[string]any) {
			data([]map[string]any{in("a", "k", "")}, nil)(m)
			m["claim"].(map[string]any)["dataMiB"] = 0
		},
	} {
		_, code := b.submit(t, b.platform, jobInput(b.poolA.ID, mod))
		require.Equal(t, "BAD_INPUT", code, name)
	}
	require.Equal(t, before, b.count(t, "SELECT count(*) FROM jobs"), "refusals queue nothing")

	ctx := context.Background()
	_, err := s3.Client.PutObject(ctx, s3.Bucket, "datasets/one.csv", strings.NewReader("a,b\n1,2\n"), 8, minioPutOptions())
	require.NoError(t, err)
	theirs := "https://data.example.com/two.bin?X-Amz-Signature=abc123&X-Amz-Expires=600"
	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID, data(
		[]map[string]any{in("one.csv", "datasets/one.csv", ""), in("two.bin", "", theirs)},
		[]map[string]any{out("/outputs/result.txt", "results/"+"r1.txt")})))
	require.Empty(t, code)
	got, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { inputs { name key url } outputs { path key } } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, map[string]any{
		"inputs": []any{
			map[string]any{"name": "one.csv", "key": "datasets/one.csv", "url": nil},
			map[string]any{"name": "two.bin", "key": nil, "url": "https://data.example.com/two.bin?…"},
		},
		"outputs": []any{map[string]any{"path": "/outputs/result.txt", "key": "results/r1.txt"}},
	}, got["job"], "a submitter's URL is shown without its signature")

	leases := b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	l := leases[0]
	require.Len(t, l.Inputs, 2)
	require.EqualValues(t, 1, l.DataMiB)
	require.Equal(t, theirs, l.Inputs[1].URL, "a submitter's URL exactly as given")
	resp, err := http.Get(l.Inputs[0].URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "a,b\n1,2\n", string(body))
	require.Len(t, l.Outputs, 1)
	req, err := http.NewRequest(http.MethodPut, l.Outputs[0].URL, strings.NewReader("42\n"))
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	info, err := s3.Client.StatObject(ctx, s3.Bucket, "results/r1.txt", minioStatOptions())
	require.NoError(t, err)
	require.EqualValues(t, 3, info.Size)

	// The result attests what moved; the server checks the output in the
	// storage (size, ETag = MD5) before it accepts it.
	zero := 0
	md := md5.Sum([]byte("42\n"))
	inRec := []runnerapi.InputRecord{{Name: "one.csv", Key: "datasets/one.csv", SHA256: strings.Repeat("a", 64), Size: 8, ETag: "e1"},
		{Name: "two.bin", SHA256: strings.Repeat("b", 64), Size: 5}}
	outRec := runnerapi.OutputRecord{Key: "results/r1.txt", SHA256: strings.Repeat("c", 64), Size: 3, MD5: hex.EncodeToString(md[:])}
	r := b.result(t, c, l, runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, Inputs: inRec, Outputs: []runnerapi.OutputRecord{outRec}})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	got, code = b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state runs { inputs { name key sha256 size etag } outputs { key sha256 size md5 } } } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, "SUCCEEDED", got["job"].(map[string]any)["state"])
	run := got["job"].(map[string]any)["runs"].([]any)[0].(map[string]any)
	require.Equal(t, []any{
		map[string]any{"name": "one.csv", "key": "datasets/one.csv", "sha256": strings.Repeat("a", 64), "size": 8.0, "etag": "e1"},
		map[string]any{"name": "two.bin", "key": nil, "sha256": strings.Repeat("b", 64), "size": 5.0, "etag": nil},
	}, run["inputs"])
	require.Equal(t, []any{map[string]any{"key": "results/r1.txt", "sha256": strings.Repeat("c", 64), "size": 3.0, "md5": hex.EncodeToString(md[:])}}, run["outputs"])

	// A success whose output is not in the storage, or not as uploaded, is
	// not accepted as one: the attempt is given back, the host's fault.
	for name, c2 := range map[string]struct {
		rec  runnerapi.OutputRecord
		says string
	}{
		"not uploaded": {runnerapi.OutputRecord{Key: "results/none", SHA256: outRec.SHA256, Size: 3, MD5: outRec.MD5}, "not in the storage"},
		"another size": {runnerapi.OutputRecord{Key: "results/r1.txt", SHA256: outRec.SHA256, Size: 4, MD5: outRec.MD5}, "the storage has 3 bytes"},
		"another md5":  {runnerapi.OutputRecord{Key: "results/r1.txt", SHA256: outRec.SHA256, Size: 3, MD5: strings.Repeat("0", 32)}, "is not the upload's MD5"},
		"not attested": {runnerapi.OutputRecord{}, "did not attest"},
	} {
		key := c2.rec.Key
		if key == "" {
			key = "results/unattested"
		}
		jid, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) {
			in["outputs"] = []map[string]any{out("/outputs/r", key)}
			in["maxAttempts"] = 1
			in["claim"].(map[string]any)["dataMiB"] = 1
		}))
		require.Empty(t, code, name)
		// A runner of its own: a host fault holds a runner back a while.
		_, c, _ := b.approvedRunner(t, measured(0))
		ls := b.lease(t, c, anyWork(0))
		require.Len(t, ls, 1, name)
		req := runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero}
		if c2.rec.Key != "" {
			req.Outputs = []runnerapi.OutputRecord{c2.rec}
		}
		r := b.result(t, c, ls[0], req)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		got, _ := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state stateReason runs { exitCode hostFault returnReason } } }`, map[string]any{"id": jid})
		j := got["job"].(map[string]any)
		require.Equal(t, "FAILED", j["state"], name)
		run := j["runs"].([]any)[0].(map[string]any)
		require.Nil(t, run["exitCode"], name)
		require.Equal(t, true, run["hostFault"], name)
		require.Contains(t, run["returnReason"], c2.says, name)
	}
}

// Without storage, a job may name only URLs its submitter presigned.
func TestObjectKeysNeedStorage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok, code := b.gql(t, b.platform, `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { storageOrigins { port } } }`,
		map[string]any{"p": b.poolA.ID})
	require.Empty(t, code)
	require.Equal(t, []any{}, tok["createEnrolmentToken"].(map[string]any)["storageOrigins"])
	_, code = b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) {
		in["inputs"] = []map[string]any{{"name": "a", "key": "k"}}
	}))
	require.Equal(t, "BAD_INPUT", code)
	_, code = b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) {
		in["outputs"] = []map[string]any{{"path": "/outputs/a", "key": "k"}}
	}))
	require.Equal(t, "BAD_INPUT", code)
	_, code = b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) {
		in["inputs"] = []map[string]any{{"name": "a", "url": "https://data.example.com/a?sig=1"}}
		in["claim"].(map[string]any)["dataMiB"] = 1
	}))
	require.Empty(t, code)
}

func minioPutOptions() minio.PutObjectOptions   { return minio.PutObjectOptions{} }
func minioStatOptions() minio.StatObjectOptions { return minio.StatObjectOptions{} }
