package queue

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// A result that could not be true is refused, on each of its bounds.
func TestAResultIsChecked(t *testing.T) {
	t.Parallel()
	zero, reason, empty := 0, "the image could not be pulled", ""
	text := func(n int) *string { s := strings.Repeat("x", n); return &s }
	exit := func(c int) *int { return &c }
	mib := func(m int64) *int64 { return &m }
	hex := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		name string
		req  runnerapi.ResultRequest
		want string // "" when taken
	}{
		{"an exit code", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero}, ""},
		{"a reason", runnerapi.ResultRequest{Attempt: 1, ReturnReason: &reason}, ""},
		{"no attempt", runnerapi.ResultRequest{Attempt: 0, ExitCode: &zero}, "attempt: 1 to 2147483647"},
		{"both", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, ReturnReason: &reason}, "exactly one of exit_code and return_reason"},
		{"neither", runnerapi.ResultRequest{Attempt: 1}, "exactly one of exit_code and return_reason"},
		{"the lowest exit code", runnerapi.ResultRequest{Attempt: 1, ExitCode: exit(math.MinInt32)}, ""},
		{"below it", runnerapi.ResultRequest{Attempt: 1, ExitCode: exit(math.MinInt32 - 1)}, "exit_code: a 32-bit integer"},
		{"the highest exit code", runnerapi.ResultRequest{Attempt: 1, ExitCode: exit(math.MaxInt32)}, ""},
		{"above it", runnerapi.ResultRequest{Attempt: 1, ExitCode: exit(math.MaxInt32 + 1)}, "exit_code: a 32-bit integer"},
		{"no peak memory", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, PeakMemoryMiB: mib(0)}, ""},
		{"a negative peak", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, PeakMemoryMiB: mib(-1)}, "peak_memory_mib: not negative"},
		{"an empty reason", runnerapi.ResultRequest{Attempt: 1, ReturnReason: &empty}, "return_reason: 1 to 512 characters, no control characters"},
		{"the longest reason", runnerapi.ResultRequest{Attempt: 1, ReturnReason: text(512)}, ""},
		{"past it", runnerapi.ResultRequest{Attempt: 1, ReturnReason: text(513)}, "return_reason: 1 to 512 characters, no control characters"},
		{"a digest", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, ImageDigest: text(256)}, ""},
		{"an empty digest", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, ImageDigest: &empty}, "image_digest: 1 to 256 bytes when given, no control characters"},
		{"a long version", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero, RunnerVersion: text(257)}, "runner_version: 1 to 256 bytes when given, no control characters"},
		{"an output's record", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero,
			Outputs: []runnerapi.OutputRecord{{Key: "out/c", SHA256: hex(64), MD5: hex(32)}}}, ""},
		{"a record that could not be", runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero,
			Outputs: []runnerapi.OutputRecord{{Key: "out/c", SHA256: hex(64), MD5: hex(31)}}}, "outputs[0].md5: 32 lower-case hex digits"},
	} {
		err := CheckResult(c.req)
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.EqualError(t, err, c.want, c.name)
	}
}

// What a runner reports of an attempt: its version is the agent's as last
// heartbeated unless the result names one, and data records come only
// with a result that has some.
func TestAnOutcomeIsWhatTheRunnerReported(t *testing.T) {
	t.Parallel()
	runner := record.Runner{ID: uuid.New()}
	runner.AgentVersion = "1.4.0"
	job, zero, digest, other := uuid.New(), 0, "sha256:abc", "1.5.0"
	peak := int64(300)
	req := runnerapi.ResultRequest{Attempt: 2, ExitCode: &zero, OOM: true, HostFault: true, PeakMemoryMiB: &peak, ImageDigest: &digest}
	require.Equal(t, record.Outcome{
		JobID: job, Attempt: 2, RunnerID: runner.ID, ExitCode: &zero, HostFault: true, OOM: true, PeakMemoryMiB: &peak,
		ImageDigest: &digest, RunnerVersion: &runner.AgentVersion,
	}, outcome(runner, job, req))
	req.RunnerVersion = &other
	require.Equal(t, "1.5.0", *outcome(runner, job, req).RunnerVersion)

	in := []runnerapi.InputRecord{{Name: "a"}}
	out := []runnerapi.OutputRecord{{Key: "c"}}
	req.Inputs = in
	require.Equal(t, &record.RunData{Inputs: in}, outcome(runner, job, req).Data)
	req.Inputs, req.Outputs = nil, out
	require.Equal(t, &record.RunData{Outputs: out}, outcome(runner, job, req).Data)
}

// A result ends its attempt, fenced: another attempt's, or one for no job
// the runner holds, is stale and changes nothing; the same result sent
// again is answered as recorded.
func TestAResultEndsItsAttempt(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	j := d.submit(t, record.AllOrganisations(), nil)
	d.leased(t, 1)
	ctx := context.Background()
	zero, one := 0, 1
	result := func(id uuid.UUID, req runnerapi.ResultRequest) (runnerapi.ResultResponse, error) {
		return d.leases.Result(ctx, d.runner, id, req)
	}

	_, err := result(j.ID, runnerapi.ResultRequest{Attempt: 1})
	refusedWith(t, err, runnerapi.CodeBadRequest)
	_, err = result(j.ID, runnerapi.ResultRequest{Attempt: 2, ExitCode: &zero})
	refusedWith(t, err, runnerapi.CodeStaleAttempt)
	_, err = result(uuid.New(), runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	refusedWith(t, err, runnerapi.CodeStaleAttempt)
	require.Equal(t, record.JobLeased, d.job(t, j.ID).State, "nothing refused changed the job")

	got, err := result(j.ID, runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, runnerapi.ResultResponse{State: string(record.JobSucceeded)}, got)
	got, err = result(j.ID, runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, runnerapi.ResultResponse{State: string(record.JobSucceeded), AlreadyRecorded: true}, got)
	_, err = result(j.ID, runnerapi.ResultRequest{Attempt: 1, ExitCode: &one})
	refusedWith(t, err, runnerapi.CodeStaleAttempt)

	// A result that could not be recorded is an error, not an answer.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.leases.Result(gone, d.runner, j.ID, runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	require.ErrorIs(t, err, context.Canceled)
}

// Several results in one request: a malformed one refuses them all
// (nothing is recorded), a stale one is answered stale on its own and the
// others count.
func TestResultsEndTheirAttemptsTogether(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	a := d.submit(t, record.AllOrganisations(), nil)
	b := d.submit(t, record.AllOrganisations(), nil)
	d.leased(t, 2)
	ctx := context.Background()
	zero := 0
	ok := func(id string, attempt int) runnerapi.LeaseResult {
		return runnerapi.LeaseResult{LeaseID: id, ResultRequest: runnerapi.ResultRequest{Attempt: attempt, ExitCode: &zero}}
	}
	results := func(rs ...runnerapi.LeaseResult) (runnerapi.ResultsResponse, error) {
		return d.leases.Results(ctx, d.runner, runnerapi.ResultsRequest{Results: rs})
	}

	for name, rs := range map[string][]runnerapi.LeaseResult{
		"none":                   nil,
		"too many":               make([]runnerapi.LeaseResult, runnerapi.MaxResultsPerRequest+1),
		"a lease id that is not": {ok(a.ID.String(), 1), ok("not a lease", 1)},
		"a malformed result":     {ok(a.ID.String(), 1), ok(b.ID.String(), 0)},
	} {
		_, err := results(rs...)
		refusedWith(t, err, runnerapi.CodeBadRequest)
		require.Equal(t, record.JobLeased, d.job(t, a.ID).State, name)
	}
	_, err := results(ok(a.ID.String(), 1), ok("not a lease", 1))
	require.EqualError(t, err, "bad_request: results[1]: lease_id is not a lease")
	_, err = results(ok(a.ID.String(), 1), ok(b.ID.String(), 0))
	require.EqualError(t, err, "bad_request: results[1]: attempt: 1 to 2147483647")

	got, err := results(ok(a.ID.String(), 1), ok(b.ID.String(), 2))
	require.NoError(t, err)
	require.Equal(t, runnerapi.ResultsResponse{Results: []runnerapi.ResultAnswer{
		{LeaseID: a.ID.String(), State: string(record.JobSucceeded)},
		{LeaseID: b.ID.String(), Error: &runnerapi.ErrorBody{Code: runnerapi.CodeStaleAttempt,
			Message: "this attempt is no longer the runner's: nothing was recorded"}},
	}}, got)
	require.Equal(t, record.JobLeased, d.job(t, b.ID).State)
	got, err = results(ok(a.ID.String(), 1), ok(b.ID.String(), 1))
	require.NoError(t, err)
	require.Equal(t, []runnerapi.ResultAnswer{
		{LeaseID: a.ID.String(), State: string(record.JobSucceeded), AlreadyRecorded: true},
		{LeaseID: b.ID.String(), State: string(record.JobSucceeded)},
	}, got.Results)

	// As many as a request may carry: each answered, here stale.
	many := make([]runnerapi.LeaseResult, runnerapi.MaxResultsPerRequest)
	for i := range many {
		many[i] = ok(uuid.NewString(), 1)
	}
	got, err = results(many...)
	require.NoError(t, err)
	require.Len(t, got.Results, runnerapi.MaxResultsPerRequest)
	require.Equal(t, runnerapi.CodeStaleAttempt, got.Results[runnerapi.MaxResultsPerRequest-1].Error.Code)
}
