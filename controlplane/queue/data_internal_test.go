package queue

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/internal/s3test"
	"github.com/runmesh/runmesh/runnerapi"
)

// A job's data against a storage (one versitygw for both rules).
func TestData(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t, "runmesh-queue")
	keysArePresigned(t, s3)
	outputsAreCheckedBeforeASuccess(t, s3)
}

// A lease's object keys come presigned, for the job's wall clock, its
// lease and an hour; an input the submitter presigned goes as given.
// Without storage a key goes with no URL, and nothing is checked.
func keysArePresigned(t *testing.T, s3 *s3test.Server) {
	d := newDesk(t, deskOptions{leases: LeasesOptions{Bucket: openBucket(t, s3), DefaultLeaseSeconds: 30}})
	d.q.HasStorage = true
	withData := func(s *Submission) {
		s.Options.Inputs = []runnerapi.JobInput{{Name: "a", Key: "in/a"}, {Name: "b", URL: "https://example.com/b?sig=1"}}
		s.Options.Outputs = []runnerapi.JobOutput{{Path: "/outputs/c", Key: "out/c"}}
		s.Options.DataMiB = 1
	}
	d.submit(t, record.AllOrganisations(), withData)
	l := d.leased(t, 1)[0]
	require.Len(t, l.Inputs, 2)
	require.Equal(t, runnerapi.LeaseInput{Name: "b", URL: "https://example.com/b?sig=1"}, l.Inputs[1])
	require.Equal(t, "a", l.Inputs[0].Name)
	require.Equal(t, "in/a", l.Inputs[0].Key)
	require.Len(t, l.Outputs, 1)
	require.Equal(t, "/outputs/c", l.Outputs[0].Path)
	for _, u := range []string{l.Inputs[0].URL, l.Outputs[0].URL} {
		p, err := url.Parse(u)
		require.NoError(t, err)
		require.Equal(t, "3690", p.Query().Get("X-Amz-Expires"), "60 s of wall clock, 30 of lease, an hour: %s", u)
	}
	require.True(t, strings.Contains(l.Inputs[0].URL, "/in/a?"), l.Inputs[0].URL)
	require.True(t, strings.Contains(l.Outputs[0].URL, "/out/c?"), l.Outputs[0].URL)

	// Inputs alone, outputs alone.
	d.submit(t, record.AllOrganisations(), func(s *Submission) {
		s.Options.Inputs, s.Options.DataMiB = []runnerapi.JobInput{{Name: "a", Key: "in/a"}}, 1
	})
	d.submit(t, record.AllOrganisations(), func(s *Submission) {
		s.Options.Outputs, s.Options.DataMiB = []runnerapi.JobOutput{{Path: "/outputs/c", Key: "out/c"}}, 1
	})
	two := d.leased(t, 2)
	require.Len(t, two[0].Inputs, 1)
	require.NotEmpty(t, two[0].Inputs[0].URL)
	require.Nil(t, two[0].Outputs)
	require.Nil(t, two[1].Inputs)
	require.Len(t, two[1].Outputs, 1)
	require.NotEmpty(t, two[1].Outputs[0].URL)

	plain := newDesk(t, deskOptions{})
	plain.q.HasStorage = true
	j := plain.submit(t, record.AllOrganisations(), withData)
	l = plain.leased(t, 1)[0]
	require.Equal(t, []runnerapi.LeaseInput{{Name: "a", Key: "in/a"}, {Name: "b", URL: "https://example.com/b?sig=1"}}, l.Inputs)
	require.Equal(t, []runnerapi.LeaseOutput{{Path: "/outputs/c", Key: "out/c"}}, l.Outputs)
	zero := 0
	got, err := plain.leases.Result(context.Background(), plain.runner, j.ID, runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, string(record.JobSucceeded), got.State, "no storage to check against")
}

// An attempt that exited 0 succeeds only if the storage has each output
// as the runner attested it: there, of the size uploaded, its ETag the
// upload's MD5. One that does not is the host's fault. An attempt that
// failed is not checked, nor a job without outputs.
func outputsAreCheckedBeforeASuccess(t *testing.T, s3 *s3test.Server) {
	// Each case a host fault but for three: none quarantines the runner.
	d := newDesk(t, deskOptions{leases: LeasesOptions{Bucket: openBucket(t, s3), QuarantineAfter: 100}})
	d.q.HasStorage = true
	ctx := context.Background()
	put := func(key, body string) {
		_, err := s3.Client.PutObject(ctx, s3.Bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		require.NoError(t, err)
	}
	attest := func(key, body string, size int64) runnerapi.OutputRecord {
		sum, m := sha256.Sum256([]byte(body)), md5.Sum([]byte(body))
		return runnerapi.OutputRecord{Key: key, SHA256: hex.EncodeToString(sum[:]), MD5: hex.EncodeToString(m[:]), Size: size}
	}
	zero, one := 0, 1
	for _, c := range []struct {
		name    string
		outputs []string
		stored  map[string]string
		result  runnerapi.ResultRequest
		state   record.JobState
		reason  string
	}{
		{name: "not attested", outputs: []string{"out/1"}, result: runnerapi.ResultRequest{ExitCode: &zero},
			state: record.JobFailed, reason: "host fault: output out/1: the runner did not attest its upload; 1 of 1 attempts used"},
		{name: "another key attested", outputs: []string{"out/2"}, result: runnerapi.ResultRequest{ExitCode: &zero,
			Outputs: []runnerapi.OutputRecord{attest("out/x", "abc", 3)}},
			state: record.JobFailed, reason: "host fault: output out/2: the runner did not attest its upload; 1 of 1 attempts used"},
		{name: "the second not attested", outputs: []string{"out/3a", "out/3b"}, stored: map[string]string{"out/3a": "abc"},
			result: runnerapi.ResultRequest{ExitCode: &zero, Outputs: []runnerapi.OutputRecord{attest("out/3a", "abc", 3)}},
			state:  record.JobFailed, reason: "host fault: output out/3b: the runner did not attest its upload; 1 of 1 attempts used"},
		{name: "not in the storage", outputs: []string{"out/4"}, result: runnerapi.ResultRequest{ExitCode: &zero,
			Outputs: []runnerapi.OutputRecord{attest("out/4", "abc", 3)}},
			state: record.JobFailed, reason: "host fault: output out/4: not in the storage; 1 of 1 attempts used"},
		{name: "another size", outputs: []string{"out/5"}, stored: map[string]string{"out/5": "abc"},
			result: runnerapi.ResultRequest{ExitCode: &zero, Outputs: []runnerapi.OutputRecord{attest("out/5", "abcd", 4)}},
			state:  record.JobFailed, reason: "host fault: output out/5: the storage has 3 bytes, the runner uploaded 4; 1 of 1 attempts used"},
		{name: "another body", outputs: []string{"out/6"}, stored: map[string]string{"out/6": "abc"},
			result: runnerapi.ResultRequest{ExitCode: &zero, Outputs: []runnerapi.OutputRecord{attest("out/6", "abd", 3)}},
			state:  record.JobFailed, reason: "host fault: output out/6: the storage's ETag " + hexMD5("abc") + " is not the upload's MD5 " + hexMD5("abd") +
				"; 1 of 1 attempts used"},
		{name: "as attested", outputs: []string{"out/7a", "out/7b"}, stored: map[string]string{"out/7a": "abc", "out/7b": ""},
			result: runnerapi.ResultRequest{ExitCode: &zero, Outputs: []runnerapi.OutputRecord{attest("out/7a", "abc", 3), attest("out/7b", "", 0)}},
			state:  record.JobSucceeded},
		{name: "a failure", outputs: []string{"out/8"}, result: runnerapi.ResultRequest{ExitCode: &one},
			state: record.JobFailed, reason: "exited with code 1"},
		{name: "no outputs", result: runnerapi.ResultRequest{ExitCode: &zero}, state: record.JobSucceeded},
	} {
		j := d.submit(t, record.AllOrganisations(), func(s *Submission) {
			for _, k := range c.outputs {
				s.Options.Outputs = append(s.Options.Outputs, runnerapi.JobOutput{Path: "/outputs/" + strings.ReplaceAll(k, "/", "-"), Key: k})
				s.Options.DataMiB = 1
			}
		})
		d.leased(t, 1)
		for k, body := range c.stored {
			put(k, body)
		}
		c.result.Attempt = 1
		got, err := d.leases.Result(ctx, d.runner, j.ID, c.result)
		require.NoError(t, err, c.name)
		require.Equal(t, string(c.state), got.State, c.name)
		require.Equal(t, c.reason, d.job(t, j.ID).StateReason, c.name)
	}

	_, err := d.leases.Result(ctx, d.runner, uuid.New(), runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	refusedWith(t, err, runnerapi.CodeStaleAttempt)
}

func hexMD5(s string) string {
	m := md5.Sum([]byte(s))
	return hex.EncodeToString(m[:])
}

func openBucket(t *testing.T, s *s3test.Server) *objects.Bucket {
	t.Helper()
	creds, err := s.CredentialsFile(t.TempDir())
	require.NoError(t, err)
	b, err := objects.Open(objects.Config{Endpoint: s.Endpoint(), Bucket: s.Bucket, Region: s.Region, CredentialsFile: creds})
	require.NoError(t, err)
	return b
}
