package queue

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// Submission is a job as a caller asks for it. Env is a list, as given, so
// that a name given twice is refused rather than one value winning.
type Submission struct {
	PoolID         uuid.UUID
	SubmittedBy    *uuid.UUID
	Image          string
	Command        []string
	Env            []EnvVar
	Claim          record.Claim
	Options        record.JobOptions
	Priority       int
	MaxAttempts    int
	IdempotencyKey *string
	Kind           string
	// Selector is a label selector in Kubernetes' syntax, as given ("":
	// any runner); the job keeps it parsed, in its options.
	Selector string
	// IdleTimeoutSeconds is as given (nil: none), so that a 0 is refused
	// rather than read as none; the job keeps it in its options (which
	// the check sets from this, whatever Options held).
	IdleTimeoutSeconds *int
}

// EnvVar is one environment variable of a submission.
type EnvVar struct{ Name, Value string }

// MaxBatch bounds one batch submission.
const MaxBatch = store.MaxBatch

// Submit queues a job in a pool inside scope. A job submitted before with
// the same idempotency key in the same pool is returned instead, and
// created is false.
func (s *Service) Submit(ctx context.Context, scope record.Scope, sub Submission) (job record.Job, created bool, err error) {
	jobs, made, err := s.SubmitAll(ctx, scope, []Submission{sub})
	if err != nil {
		return record.Job{}, false, err
	}
	return jobs[0], made[0], nil
}

// SubmitAll queues jobs of one pool, all or none, in the order given. Every
// submission is checked here, and only here: the store below checks again
// only what its statement depends on.
func (s *Service) SubmitAll(ctx context.Context, scope record.Scope, subs []Submission) (jobs []record.Job, created []bool, err error) {
	if len(subs) == 0 || len(subs) > MaxBatch {
		return nil, nil, record.Invalidf("1 to %d jobs a batch", MaxBatch)
	}
	ns := make([]store.NewJob, len(subs))
	for i, sub := range subs {
		if sub.PoolID != subs[0].PoolID {
			return nil, nil, record.Invalidf("every job of a batch goes to the same pool")
		}
		n, msg := check(sub)
		if msg == "" {
			msg = s.checkStorage(sub)
		}
		if msg != "" {
			return nil, nil, record.InvalidItemf(i, "%s", msg)
		}
		ns[i] = n
	}
	// Unwrapped: the store's refusals (a pool out of scope is not found)
	// carry the sentinels the API's error codes are read from.
	err = audit.Change(ctx, s.st, func(tx *store.Tx) error {
		if err := networkAllowed(ctx, tx, scope, ns); err != nil {
			return err
		}
		if jobs, created, err = tx.SubmitJobs(ctx, scope, ns); err != nil {
			return err
		}
		for i, j := range jobs {
			if !created[i] && !sameSpec(j, ns[i]) {
				return fmt.Errorf("%w: jobs[%d]: idempotencyKey %q was used for another job (%s) in this pool", record.ErrConflict, i, *ns[i].IdempotencyKey, j.ID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return jobs, created, nil
}

// networkAllowed refuses a job that asks for a network in a pool that
// does not allow one (the pool is read only when one asks).
func networkAllowed(ctx context.Context, tx *store.Tx, scope record.Scope, ns []store.NewJob) error {
	i := slices.IndexFunc(ns, func(n store.NewJob) bool { return n.Options.Network })
	if i < 0 {
		return nil
	}
	pool, err := tx.UsablePool(ctx, scope, ns[i].PoolID)
	if err != nil {
		return err
	}
	if !pool.AllowNetwork {
		return record.InvalidItemf(i, "network: pool %s does not allow its jobs a network (Pool.allowNetwork)", pool.Name)
	}
	return nil
}

// sameSpec: a job submitted again under its idempotency key is the same
// job only if it asks for the same thing; the same key for another job is
// a mistake to say, not to paper over with the first one.
func sameSpec(j record.Job, n store.NewJob) bool {
	return j.Image == n.Image && slices.Equal(j.Command, n.Command) && maps.Equal(j.Env, n.Env) && j.Claim == n.Claim && j.Options.Equal(n.Options) &&
		j.Priority == n.Priority && j.MaxAttempts == n.MaxAttempts && j.Kind == n.Kind
}

// check is what is wrong with a submission ("" when nothing is), and the
// job it makes.
func check(in Submission) (store.NewJob, string) {
	if msg := checkSpec(in); msg != "" {
		return store.NewJob{}, msg
	}
	env := make(map[string]string, len(in.Env))
	for _, e := range in.Env {
		if !runnerapi.ValidEnvName(e.Name) {
			return store.NewJob{}, fmt.Sprintf("env: %q is not a variable name", e.Name)
		}
		if err := runnerapi.CheckEnvValue(e.Value); err != nil {
			return store.NewJob{}, fmt.Sprintf("env: the value of %s %v", e.Name, err)
		}
		if _, dup := env[e.Name]; dup {
			return store.NewJob{}, fmt.Sprintf("env: %s given twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	options := in.Options
	selector, err := runnerapi.ParseSelector(in.Selector)
	if err != nil {
		return store.NewJob{}, err.Error()
	}
	options.Selector = selector
	options.IdleTimeoutSeconds = 0
	if in.IdleTimeoutSeconds != nil {
		options.IdleTimeoutSeconds = *in.IdleTimeoutSeconds
	}
	return store.NewJob{
		PoolID: in.PoolID, SubmittedBy: in.SubmittedBy, Image: in.Image, Command: in.Command, Env: env, Claim: in.Claim, Options: options,
		Priority: in.Priority, MaxAttempts: in.MaxAttempts, IdempotencyKey: in.IdempotencyKey, Kind: in.Kind,
	}, ""
}

// checkSpec checks the bounds of every field but the env's names.
func checkSpec(in Submission) string {
	if err := runnerapi.CheckImage(in.Image); err != nil {
		return err.Error()
	}
	c := in.Claim
	switch {
	case c.Cores <= 0 || c.Cores > 4096 || math.IsNaN(c.Cores):
		return "claim.cores: more than 0, at most 4096"
	case c.MemoryMiB < 0:
		return "claim.memoryMiB: not negative"
	case c.GPUs < 0 || c.GPUs > 64:
		return "claim.gpus: 0 to 64"
	case c.WallClockSeconds < 1 || c.WallClockSeconds > 365*24*3600:
		return "claim.wallClockSeconds: 1 to 31536000"
	case in.Priority < -1000 || in.Priority > 1000:
		return "priority: -1000 to 1000"
	case in.MaxAttempts < 1 || in.MaxAttempts > 100:
		return "maxAttempts: 1 to 100"
	case !runnerapi.ValidKind(in.Kind):
		return "kind: lower-case letters, digits, dots, dashes and underscores"
	case len(in.Command) > 256 || len(in.Env) > 256:
		return "command and env: at most 256 entries each"
	}
	if msg := checkOptions(in.Options, c); msg != "" {
		return msg
	}
	if msg := checkStdio(in.Options.Stdio, in.IdleTimeoutSeconds); msg != "" {
		return msg
	}
	if in.IdempotencyKey != nil && (*in.IdempotencyKey == "" || len(*in.IdempotencyKey) > 200) {
		return "idempotencyKey: 1 to 200 characters"
	}
	if in.IdempotencyKey != nil && runnerapi.CheckArg(*in.IdempotencyKey) != nil {
		return "idempotencyKey: no NUL, valid UTF-8"
	}
	for i, a := range in.Command {
		if err := runnerapi.CheckArg(a); err != nil {
			return fmt.Sprintf("command[%d]: %v", i, err)
		}
	}
	// The spec travels whole in every lease answer, so it is bounded: an
	// agent reads at most runnerapi.LeaseAnswerBytes. (The claim measures
	// specs as text, at least these bytes: see the store's ClaimJobs.)
	size := len(in.Image)
	for _, a := range in.Command {
		size += len(a)
	}
	for _, e := range in.Env {
		size += len(e.Name) + len(e.Value)
	}
	size += runnerapi.DataLeaseBytes(in.Options.Inputs, in.Options.Outputs)
	if size > runnerapi.MaxJobSpecBytes {
		return fmt.Sprintf("image, command, env, inputs and outputs: at most %d KiB together (a presigned URL counts %d bytes and its key four times)",
			runnerapi.MaxJobSpecBytes>>10, runnerapi.PresignedURLBytes)
	}
	return ""
}

// MaxDataMiB bounds claim.dataMiB (16 TiB).
const MaxDataMiB = 16 << 20

// MaxDataWallClock bounds the wall clock of a job whose data the server
// presigns: a SigV4 URL is valid for at most 7 days, and it must outlive
// the job's wall clock, its lease (at most an hour) and the time to start.
const MaxDataWallClock = 7*24*3600 - 3600 - 3600

// checkStorage refuses object keys on a server without storage, and a wall
// clock longer than a presigned URL can last.
func (s *Service) checkStorage(sub Submission) string {
	keys := len(sub.Options.Outputs) > 0 || slices.ContainsFunc(sub.Options.Inputs, func(in runnerapi.JobInput) bool { return in.Key != "" })
	switch {
	case !keys:
		return ""
	case !s.HasStorage:
		return "inputs and outputs: this server has no object storage for keys (storage: in server.yaml); an input may be an https URL you presigned"
	case sub.Claim.WallClockSeconds > MaxDataWallClock:
		return fmt.Sprintf("claim.wallClockSeconds: at most %d for a job with object keys (a presigned URL lasts at most 7 days)", MaxDataWallClock)
	}
	return ""
}

// checkOptions checks how the job asks to run: a working directory podman
// takes as given, and a scratch tmpfs that fits in the memory claimed.
func checkOptions(o record.JobOptions, c record.Claim) string {
	if o.WorkingDir != "" {
		if err := runnerapi.CheckWorkingDir(o.WorkingDir); err != nil {
			return "workingDir: " + err.Error()
		}
	}
	if err := runnerapi.CheckInputs(o.Inputs); err != nil {
		return err.Error()
	}
	if err := runnerapi.CheckOutputs(o.Outputs); err != nil {
		return err.Error()
	}
	switch {
	case o.ScratchMiB < 0:
		return "claim.scratchMiB: not negative"
	case o.DataMiB < 0 || o.DataMiB > MaxDataMiB:
		return fmt.Sprintf("claim.dataMiB: 0 to %d", MaxDataMiB)
	case (len(o.Inputs) > 0 || len(o.Outputs) > 0) && o.DataMiB == 0:
		return "claim.dataMiB: required with inputs or outputs: how many MiB they may take on the runner together"
	case o.ScratchMiB > 0 && o.ScratchMiB > c.MemoryMiB:
		return "claim.scratchMiB: the tmpfs's pages are the job's memory; claim at least as much memory (claim.memoryMiB)"
	}
	return ""
}

// checkStdio checks a job's mode, and its idle timeout: only a job that
// takes input (TTY, PIPE) can be idle, and the timeout is bounded.
func checkStdio(mode runnerapi.Stdio, idle *int) string {
	switch {
	case !mode.Valid():
		return "stdio: LOGS, TTY or PIPE"
	case idle == nil:
		return ""
	case !mode.Interactive():
		return "idleTimeoutSeconds: only for an interactive job (stdio TTY or PIPE): a LOGS job takes no input to be idle on"
	case *idle < runnerapi.MinIdleTimeoutSeconds || *idle > runnerapi.MaxIdleTimeoutSeconds:
		return fmt.Sprintf("idleTimeoutSeconds: %d to %d (a minute to 7 days)", runnerapi.MinIdleTimeoutSeconds, runnerapi.MaxIdleTimeoutSeconds)
	}
	return ""
}
