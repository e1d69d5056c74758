package queue

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// submission is a job that passes every check, changed by f.
func submission(f func(*Submission)) Submission {
	s := Submission{Image: "busybox", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 1, Kind: "default"}
	if f != nil {
		f(&s)
	}
	return s
}

func seconds(n int) *int { return &n }

func envVars(n int) []EnvVar {
	env := make([]EnvVar, n)
	for i := range env {
		env[i] = EnvVar{Name: fmt.Sprintf("V%d", i)}
	}
	return env
}

// Each bound of a submission, on both sides: the last value it allows is
// taken, the first past it is refused with the field named.
func TestEachBoundOfASubmission(t *testing.T) {
	t.Parallel()
	key := func(n int) *string { k := strings.Repeat("k", n); return &k }
	output := []runnerapi.JobOutput{{Path: "/outputs/model.bin", Key: "runs/model.bin"}}
	// The spec's bytes: the image's, each argument's, each variable's name
	// and value.
	specOf := func(value int) func(*Submission) {
		return func(s *Submission) { s.Env = []EnvVar{{Name: "BIG", Value: strings.Repeat("x", value)}} }
	}
	room := runnerapi.MaxJobSpecBytes - len("busybox") - len("BIG")
	for _, c := range []struct {
		name string
		f    func(*Submission)
		want string // "" when taken
	}{
		{"the smallest claim", nil, ""},
		{"no cores", func(s *Submission) { s.Claim.Cores = 0 }, "claim.cores: more than 0, at most 4096"},
		{"4096 cores", func(s *Submission) { s.Claim.Cores = 4096 }, ""},
		{"past 4096 cores", func(s *Submission) { s.Claim.Cores = 4096.5 }, "claim.cores: more than 0, at most 4096"},
		{"cores not a number", func(s *Submission) { s.Claim.Cores = math.NaN() }, "claim.cores: more than 0, at most 4096"},
		{"negative memory", func(s *Submission) { s.Claim.MemoryMiB = -1 }, "claim.memoryMiB: not negative"},
		{"no GPUs", func(s *Submission) { s.Claim.GPUs = 0 }, ""},
		{"negative GPUs", func(s *Submission) { s.Claim.GPUs = -1 }, "claim.gpus: 0 to 64"},
		{"64 GPUs", func(s *Submission) { s.Claim.GPUs = 64 }, ""},
		{"65 GPUs", func(s *Submission) { s.Claim.GPUs = 65 }, "claim.gpus: 0 to 64"},
		{"no wall clock", func(s *Submission) { s.Claim.WallClockSeconds = 0 }, "claim.wallClockSeconds: 1 to 31536000"},
		{"a second", func(s *Submission) { s.Claim.WallClockSeconds = 1 }, ""},
		{"a year", func(s *Submission) { s.Claim.WallClockSeconds = 31536000 }, ""},
		{"past a year", func(s *Submission) { s.Claim.WallClockSeconds = 31536001 }, "claim.wallClockSeconds: 1 to 31536000"},
		{"priority -1000", func(s *Submission) { s.Priority = -1000 }, ""},
		{"priority -1001", func(s *Submission) { s.Priority = -1001 }, "priority: -1000 to 1000"},
		{"priority 1000", func(s *Submission) { s.Priority = 1000 }, ""},
		{"priority 1001", func(s *Submission) { s.Priority = 1001 }, "priority: -1000 to 1000"},
		{"no attempt", func(s *Submission) { s.MaxAttempts = 0 }, "maxAttempts: 1 to 100"},
		{"100 attempts", func(s *Submission) { s.MaxAttempts = 100 }, ""},
		{"101 attempts", func(s *Submission) { s.MaxAttempts = 101 }, "maxAttempts: 1 to 100"},
		{"256 arguments", func(s *Submission) { s.Command = make([]string, 256) }, ""},
		{"257 arguments", func(s *Submission) { s.Command = make([]string, 257) }, "command and env: at most 256 entries each"},
		{"256 variables", func(s *Submission) { s.Env = envVars(256) }, ""},
		{"257 variables", func(s *Submission) { s.Env = envVars(257) }, "command and env: at most 256 entries each"},
		{"an argument with NUL", func(s *Submission) { s.Command = []string{"sh", "a\x00b"} }, "command[1]: a NUL or invalid UTF-8"},
		{"a working directory", func(s *Submission) { s.Options.WorkingDir = "/work" }, ""},
		{"a relative working directory", func(s *Submission) { s.Options.WorkingDir = "work" }, "workingDir: "},
		{"an input named twice", func(s *Submission) {
			s.Options.Inputs = []runnerapi.JobInput{{Name: "a", URL: "https://example.com/a"}, {Name: "a", URL: "https://example.com/b"}}
			s.Options.DataMiB = 1
		}, `inputs[1].name: "a" is named twice`},
		{"an output outside /outputs", func(s *Submission) {
			s.Options.Outputs = []runnerapi.JobOutput{{Path: "/tmp/x", Key: "x"}}
			s.Options.DataMiB = 1
		}, `outputs[0].path: "/tmp/x" is not a clean path under /outputs/`},
		{"negative scratch", func(s *Submission) { s.Options.ScratchMiB = -1 }, "claim.scratchMiB: not negative"},
		{"negative data", func(s *Submission) { s.Options.DataMiB = -1 }, "claim.dataMiB: 0 to 16777216"},
		{"16 TiB of data", func(s *Submission) { s.Options.DataMiB = MaxDataMiB }, ""},
		{"past 16 TiB of data", func(s *Submission) { s.Options.DataMiB = MaxDataMiB + 1 }, "claim.dataMiB: 0 to 16777216"},
		{"inputs without data", func(s *Submission) {
			s.Options.Inputs = []runnerapi.JobInput{{Name: "a", URL: "https://example.com/a"}}
		}, "claim.dataMiB: required with inputs or outputs: how many MiB they may take on the runner together"},
		{"outputs without data", func(s *Submission) { s.Options.Outputs = output }, "claim.dataMiB: required with inputs or outputs: how many MiB they may take on the runner together"},
		{"outputs with data", func(s *Submission) { s.Options.Outputs, s.Options.DataMiB = output, 1 }, ""},
		{"scratch as large as the memory", func(s *Submission) { s.Claim.MemoryMiB, s.Options.ScratchMiB = 512, 512 }, ""},
		{"scratch past the memory", func(s *Submission) { s.Claim.MemoryMiB, s.Options.ScratchMiB = 512, 513 },
			"claim.scratchMiB: the tmpfs's pages are the job's memory; claim at least as much memory (claim.memoryMiB)"},
		{"an empty idempotency key", func(s *Submission) { s.IdempotencyKey = key(0) }, "idempotencyKey: 1 to 200 characters"},
		{"an idempotency key of 200", func(s *Submission) { s.IdempotencyKey = key(200) }, ""},
		{"an idempotency key of 201", func(s *Submission) { s.IdempotencyKey = key(201) }, "idempotencyKey: 1 to 200 characters"},
		{"an idempotency key with NUL", func(s *Submission) { k := "a\x00"; s.IdempotencyKey = &k }, "idempotencyKey: no NUL, valid UTF-8"},
		{"a variable value with a line break", func(s *Submission) { s.Env = []EnvVar{{Name: "A", Value: "1\n2"}} },
			"env: the value of A has a line break or NUL, which podman's env file cannot carry"},
		{"a selector that does not parse", func(s *Submission) { s.Selector = "a in" }, "selector"},
		{"a TTY job", func(s *Submission) { s.Options.Stdio = runnerapi.StdioTTY }, ""},
		{"a PIPE job", func(s *Submission) { s.Options.Stdio = runnerapi.StdioPipe }, ""},
		{"a mode that is none", func(s *Submission) { s.Options.Stdio = "RAW" }, "stdio: LOGS, TTY or PIPE"},
		{"an idle timeout of a minute", func(s *Submission) { s.Options.Stdio, s.IdleTimeoutSeconds = runnerapi.StdioTTY, seconds(60) }, ""},
		{"an idle timeout of 59 s", func(s *Submission) { s.Options.Stdio, s.IdleTimeoutSeconds = runnerapi.StdioTTY, seconds(59) },
			"idleTimeoutSeconds: 60 to 604800 (a minute to 7 days)"},
		{"an idle timeout of 0", func(s *Submission) { s.Options.Stdio, s.IdleTimeoutSeconds = runnerapi.StdioPipe, seconds(0) },
			"idleTimeoutSeconds: 60 to 604800 (a minute to 7 days)"},
		{"an idle timeout of 7 days", func(s *Submission) { s.Options.Stdio, s.IdleTimeoutSeconds = runnerapi.StdioPipe, seconds(604800) }, ""},
		{"an idle timeout past 7 days", func(s *Submission) { s.Options.Stdio, s.IdleTimeoutSeconds = runnerapi.StdioPipe, seconds(604801) },
			"idleTimeoutSeconds: 60 to 604800 (a minute to 7 days)"},
		{"an idle timeout on a LOGS job", func(s *Submission) { s.IdleTimeoutSeconds = seconds(600) },
			"idleTimeoutSeconds: only for an interactive job (stdio TTY or PIPE)"},
		{"a spec at its bound", specOf(room), ""},
		{"a spec past its bound", specOf(room + 1),
			"image, command, env, inputs and outputs: at most 64 KiB together (a presigned URL counts 1024 bytes and its key four times)"},
	} {
		n, msg := check(submission(c.f))
		if c.want == "" {
			require.Empty(t, msg, c.name)
			require.Equal(t, submission(c.f).Image, n.Image, c.name)
			continue
		}
		require.True(t, strings.HasPrefix(msg, c.want), "%s: %q, want %q", c.name, msg, c.want)
	}
}

// What a checked submission makes: the job as asked, its env a map and
// its selector parsed into its options.
func TestACheckedSubmissionIsTheJobAsAsked(t *testing.T) {
	t.Parallel()
	pool, by, key := uuid.New(), uuid.New(), "nightly-1"
	n, msg := check(submission(func(s *Submission) {
		s.PoolID, s.SubmittedBy, s.IdempotencyKey = pool, &by, &key
		s.Command, s.Env = []string{"sh", "-c", "true"}, []EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: ""}}
		s.Priority, s.MaxAttempts, s.Kind = 7, 3, "batch"
		s.Selector = "gpu.model in (H100, H200)"
	}))
	require.Empty(t, msg)
	sel, err := runnerapi.ParseSelector("gpu.model in (H100, H200)")
	require.NoError(t, err)
	require.Equal(t, store.NewJob{
		PoolID: pool, SubmittedBy: &by, Image: "busybox", Command: []string{"sh", "-c", "true"}, Env: map[string]string{"A": "1", "B": ""},
		Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, Options: record.JobOptions{Selector: sel}, Priority: 7, MaxAttempts: 3,
		IdempotencyKey: &key, Kind: "batch",
	}, n)

	// An interactive job keeps its mode and its idle timeout as given,
	// and only as given: none unless one was asked for.
	n, msg = check(submission(func(s *Submission) {
		s.Options.Stdio, s.IdleTimeoutSeconds = runnerapi.StdioTTY, seconds(900)
	}))
	require.Empty(t, msg)
	require.Equal(t, record.JobOptions{Stdio: runnerapi.StdioTTY, IdleTimeoutSeconds: 900}, n.Options)
	n, msg = check(submission(func(s *Submission) { s.Options.Stdio, s.Options.IdleTimeoutSeconds = runnerapi.StdioPipe, 5 }))
	require.Empty(t, msg)
	require.Equal(t, record.JobOptions{Stdio: runnerapi.StdioPipe}, n.Options, "an idle timeout only through the checked field")
}

// Object keys need the server's storage, and a wall clock a presigned URL
// outlives (7 days less the longest lease and an hour to start); inputs
// the submitter presigned need neither.
func TestObjectKeysNeedStorage(t *testing.T) {
	t.Parallel()
	withKeys := func(wall int, in []runnerapi.JobInput, out []runnerapi.JobOutput) Submission {
		return submission(func(s *Submission) {
			s.Claim.WallClockSeconds, s.Options.Inputs, s.Options.Outputs, s.Options.DataMiB = wall, in, out, 1
		})
	}
	keyIn := []runnerapi.JobInput{{Name: "a", URL: "https://example.com/a"}, {Name: "b", Key: "in/b"}}
	urlIn := []runnerapi.JobInput{{Name: "a", URL: "https://example.com/a"}}
	out := []runnerapi.JobOutput{{Path: "/outputs/c", Key: "out/c"}}
	const week = 597600 // 7 days less two hours

	without, with := &Service{}, &Service{HasStorage: true}
	noStorage := "inputs and outputs: this server has no object storage for keys"
	require.True(t, strings.HasPrefix(without.checkStorage(withKeys(60, keyIn, nil)), noStorage), "an input's key")
	require.True(t, strings.HasPrefix(without.checkStorage(withKeys(60, nil, out)), noStorage), "an output's key")
	require.Empty(t, without.checkStorage(withKeys(31536000, urlIn, nil)), "a presigned input")
	require.Empty(t, with.checkStorage(withKeys(week, keyIn, out)))
	require.Equal(t, "claim.wallClockSeconds: at most 597600 for a job with object keys (a presigned URL lasts at most 7 days)",
		with.checkStorage(withKeys(week+1, nil, out)))
	require.Equal(t, week, MaxDataWallClock)
}

// A job submitted again under its idempotency key is the same job only if
// every field it asks for is the same.
func TestTheSameKeyIsTheSameJobOnlyForTheSameSpec(t *testing.T) {
	t.Parallel()
	n, msg := check(submission(func(s *Submission) {
		s.Command, s.Env, s.Priority, s.MaxAttempts = []string{"true"}, []EnvVar{{Name: "A", Value: "1"}}, 1, 2
	}))
	require.Empty(t, msg)
	j := record.Job{Image: n.Image, Command: n.Command, Env: n.Env, Claim: n.Claim, Options: n.Options, Priority: n.Priority,
		MaxAttempts: n.MaxAttempts, Kind: n.Kind}
	require.True(t, sameSpec(j, n))
	for name, f := range map[string]func(*record.Job){
		"image":        func(j *record.Job) { j.Image = "alpine" },
		"command":      func(j *record.Job) { j.Command = []string{"false"} },
		"env":          func(j *record.Job) { j.Env = map[string]string{"A": "2"} },
		"claim":        func(j *record.Job) { j.Claim.Cores = 2 },
		"options":      func(j *record.Job) { j.Options.Network = true },
		"stdio":        func(j *record.Job) { j.Options.Stdio = runnerapi.StdioTTY },
		"idle timeout": func(j *record.Job) { j.Options.IdleTimeoutSeconds = 600 },
		"priority":     func(j *record.Job) { j.Priority = 2 },
		"max attempts": func(j *record.Job) { j.MaxAttempts = 3 },
		"kind":         func(j *record.Job) { j.Kind = "batch" },
	} {
		other := j
		f(&other)
		require.False(t, sameSpec(other, n), name)
	}
}
