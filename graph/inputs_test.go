package graph_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func (b *testBundle) jobCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM jobs").Scan(&n))
	return n
}

// Input PostgreSQL cannot keep as given (a NUL, bytes that are not UTF-8)
// and jobs no agent would run are refused with BAD_INPUT, change nothing,
// and a refused mutation is still audited (its NUL shown as U+2400).
func TestInputThatCannotBeKeptAsGivenIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before, jobs := b.counts(t), b.jobCount(t)
	audited := len(b.auditRows(t))

	r := b.do(t, b.platform, `mutation($n: String!) { createOrganisation(input: {name: $n}) { id } }`, map[string]any{"n": "a\x00b"})
	require.Equal(t, "BAD_INPUT", r.code(), r.Raw)
	require.Contains(t, r.Errors[0].Message, "NUL")
	r = b.do(t, b.platform, `mutation { createOrganisation(input: {name: "a\u0000b"}) { id } }`, nil) // in a literal
	require.Equal(t, "BAD_INPUT", r.code(), r.Raw)
	rows := b.auditRows(t)
	require.Len(t, rows, audited+2, "each refusal is audited")
	require.Equal(t, "BAD_INPUT", rows[len(rows)-1]["outcome"])
	var detail string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT detail::text FROM audit_log ORDER BY id DESC LIMIT 1").Scan(&detail))
	require.Contains(t, detail, "a\u2400b")

	raw := b.doRaw(t, b.platform, []byte("{\"query\": \"mutation { createOrganisation(input: {name: \\\"caf\xe9\\\"}) { id } }\"}"))
	require.Equal(t, http.StatusBadRequest, raw.Status, raw.Raw)
	require.Equal(t, "BAD_INPUT", raw.code())

	submit := `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`
	for name, in := range map[string]map[string]any{
		"an image read as an option": {"image": "--privileged"},
		"an image with a space":      {"image": "busybox latest"},
		"an env value with a NUL":    {"env": []map[string]any{{"name": "K", "value": "a\x00b"}}},
		"an env value with a break":  {"env": []map[string]any{{"name": "K", "value": "a\nb"}}},
		"an env value quoted":        {"env": []map[string]any{{"name": "K", "value": `"x"`}}},
		"a command with a NUL":       {"command": []string{"echo", "a\x00"}},
	} {
		input := map[string]any{"poolId": b.poolA.ID, "image": "busybox", "command": []string{"true"}, "claim": map[string]any{"cores": 1, "wallClockSeconds": 60}}
		for k, v := range in {
			input[k] = v
		}
		r := b.do(t, b.memberA, submit, map[string]any{"in": input})
		require.Equal(t, "BAD_INPUT", r.code(), "%s: %s", name, r.Raw)
	}
	require.Equal(t, before, b.counts(t), "nothing changed")
	require.Equal(t, jobs, b.jobCount(t), "nothing queued")
}

// An idempotency key names one job: the same submission again is that job,
// another one under the same key is CONFLICT, and queues nothing.
func TestAnIdempotencyKeyNamesOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	submit := `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`
	input := func(cmd string) map[string]any {
		return map[string]any{"poolId": b.poolA.ID, "image": "busybox", "command": []string{"echo", cmd},
			"claim": map[string]any{"cores": 1, "wallClockSeconds": 60}, "idempotencyKey": "nightly-2026-12-02"}
	}
	first := b.do(t, b.memberA, submit, map[string]any{"in": input("a")})
	require.Empty(t, first.Errors, first.Raw)
	again := b.do(t, b.memberA, submit, map[string]any{"in": input("a")})
	require.Empty(t, again.Errors, again.Raw)
	require.Equal(t, dig(first.Data, "submitJob", "id"), dig(again.Data, "submitJob", "id"))
	jobs := b.jobCount(t)

	other := b.do(t, b.memberA, submit, map[string]any{"in": input("b")})
	require.Equal(t, "CONFLICT", other.code(), other.Raw)
	require.Contains(t, other.Errors[0].Message, "idempotencyKey")
	require.Equal(t, jobs, b.jobCount(t))
}

// Env values are kept out of the audit log however the job came: alone or
// in a batch.
func TestEnvValuesAreRedactedFromTheAuditLog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := map[string]any{"poolId": b.poolA.ID, "image": "busybox", "command": []string{"true"},
		"claim": map[string]any{"cores": 1, "wallClockSeconds": 60}, "env": []map[string]any{{"name": "API_KEY", "value": "s3cret-value"}}}
	r := b.do(t, b.memberA, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, map[string]any{"in": in})
	require.Empty(t, r.Errors, r.Raw)
	r = b.do(t, b.memberA, `mutation($in: [SubmitJobInput!]!) { submitJobs(inputs: $in) { id } }`, map[string]any{"in": []any{in}})
	require.Empty(t, r.Errors, r.Raw)
	var entries, leaked int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*), count(*) FILTER (WHERE detail::text LIKE '%s3cret-value%') FROM audit_log WHERE action IN ('submitJob', 'submitJobs')").Scan(&entries, &leaked))
	require.Equal(t, 2, entries)
	require.Zero(t, leaked, "no env value in the audit log")
}

// A job's stdio mode: LOGS unless asked for, kept and shown with its idle
// timeout. An idle timeout on a LOGS job, or past its bounds, is
// BAD_INPUT, a mode the schema lacks is refused, and neither changes
// anything; under an idempotency key another mode or idle timeout is
// another job (CONFLICT).
func TestAJobsStdioModeAndIdleTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	submit := `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id stdio idleTimeoutSeconds } }`
	input := func(kv map[string]any) map[string]any {
		in := map[string]any{"poolId": b.poolA.ID, "image": "busybox", "command": []string{"sh"}, "claim": map[string]any{"cores": 1, "wallClockSeconds": 60}}
		for k, v := range kv {
			in[k] = v
		}
		return in
	}
	r := b.do(t, b.memberA, submit, map[string]any{"in": input(nil)})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, map[string]any{"id": dig(r.Data, "submitJob", "id"), "stdio": "LOGS", "idleTimeoutSeconds": nil}, r.Data["submitJob"])
	shell := map[string]any{"stdio": "TTY", "idleTimeoutSeconds": 900, "idempotencyKey": "shell-1"}
	r = b.do(t, b.memberA, submit, map[string]any{"in": input(shell)})
	require.Empty(t, r.Errors, r.Raw)
	id := dig(r.Data, "submitJob", "id")
	r = b.do(t, b.memberA, `query($id: ID!) { job(id: $id) { stdio idleTimeoutSeconds } }`, map[string]any{"id": id})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, map[string]any{"stdio": "TTY", "idleTimeoutSeconds": 900.0}, r.Data["job"], "kept as asked")
	r = b.do(t, b.memberA, submit, map[string]any{"in": input(map[string]any{"stdio": "PIPE"})})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, "PIPE", dig(r.Data, "submitJob", "stdio"))

	before, jobs, events := b.counts(t), b.jobCount(t), b.eventCount(t)
	for name, c := range map[string]struct {
		in  map[string]any
		msg string
	}{
		"an idle timeout on a batch job":  {map[string]any{"idleTimeoutSeconds": 600}, "idleTimeoutSeconds: only for an interactive job (stdio TTY or PIPE)"},
		"an idle timeout on a LOGS job":   {map[string]any{"stdio": "LOGS", "idleTimeoutSeconds": 600}, "idleTimeoutSeconds: only for an interactive job"},
		"an idle timeout under a minute":  {map[string]any{"stdio": "PIPE", "idleTimeoutSeconds": 59}, "idleTimeoutSeconds: 60 to 604800 (a minute to 7 days)"},
		"an idle timeout of 0":            {map[string]any{"stdio": "TTY", "idleTimeoutSeconds": 0}, "idleTimeoutSeconds: 60 to 604800"},
		"an idle timeout past seven days": {map[string]any{"stdio": "TTY", "idleTimeoutSeconds": 604801}, "idleTimeoutSeconds: 60 to 604800"},
	} {
		r := b.do(t, b.memberA, submit, map[string]any{"in": input(c.in)})
		require.Equal(t, "BAD_INPUT", r.code(), "%s: %s", name, r.Raw)
		require.Contains(t, r.Errors[0].Message, c.msg, name)
	}
	r = b.do(t, b.memberA, submit, map[string]any{"in": input(map[string]any{"stdio": "RAW"})})
	require.NotEmpty(t, r.Errors, "a mode the schema lacks: %s", r.Raw)
	require.Contains(t, r.Errors[0].Message, "RAW")
	for _, kv := range []map[string]any{
		{"stdio": "PIPE", "idleTimeoutSeconds": 900}, {"stdio": "TTY", "idleTimeoutSeconds": 901}, {"stdio": "TTY"}, {},
	} {
		kv["idempotencyKey"] = "shell-1"
		r := b.do(t, b.memberA, submit, map[string]any{"in": input(kv)})
		require.Equal(t, "CONFLICT", r.code(), "%v: %s", kv, r.Raw)
	}
	require.Equal(t, before, b.counts(t), "nothing changed")
	require.Equal(t, jobs, b.jobCount(t), "nothing queued")
	require.Equal(t, events, b.eventCount(t), "no job changed")

	r = b.do(t, b.memberA, submit, map[string]any{"in": input(shell)})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, id, dig(r.Data, "submitJob", "id"), "the same key and spec: the same job")
}

func (b *testBundle) eventCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM job_events").Scan(&n))
	return n
}

// The mode and the idle timeout are documented where the playground reads
// them: the enum and each of its values, the job's fields and the input's.
func TestTheStdioModeIsDocumented(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, b.memberA, `{
		stdio: __type(name: "Stdio") { description enumValues { name description } }
		job: __type(name: "Job") { fields { name description } }
		input: __type(name: "SubmitJobInput") { inputFields { name description defaultValue } }
	}`, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.NotEmpty(t, dig(r.Data, "stdio", "description"))
	values := dig(r.Data, "stdio", "enumValues").([]any)
	require.Len(t, values, 3)
	for _, v := range values {
		require.NotEmpty(t, v.(map[string]any)["description"], v)
	}
	described := func(list []any, names ...string) {
		t.Helper()
		for _, name := range names {
			found := false
			for _, f := range list {
				if f := f.(map[string]any); f["name"] == name {
					found = true
					require.NotEmpty(t, f["description"], name)
				}
			}
			require.True(t, found, name)
		}
	}
	described(dig(r.Data, "job", "fields").([]any), "stdio", "idleTimeoutSeconds")
	fields := dig(r.Data, "input", "inputFields").([]any)
	described(fields, "stdio", "idleTimeoutSeconds")
	for _, f := range fields {
		if f := f.(map[string]any); f["name"] == "stdio" {
			require.Equal(t, "LOGS", f["defaultValue"])
		}
	}
}
