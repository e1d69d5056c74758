package record

import (
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/runnerapi"
)

// JobState is where a job stands.
type JobState string

const (
	JobQueued    JobState = "QUEUED"
	JobLeased    JobState = "LEASED"
	JobRunning   JobState = "RUNNING"
	JobSucceeded JobState = "SUCCEEDED"
	JobFailed    JobState = "FAILED"
	JobCancelled JobState = "CANCELLED"
	JobExpired   JobState = "EXPIRED"
	JobBlocked   JobState = "BLOCKED"
)

// Finished reports whether the state is final.
func (s JobState) Finished() bool {
	switch s {
	case JobSucceeded, JobFailed, JobCancelled, JobExpired:
		return true
	}
	return false
}

// Claim is what a job books on the runner that holds it.
type Claim struct {
	Cores            float64
	MemoryMiB        int64
	GPUs             int
	WallClockSeconds int
}

// JobOptions are how a job runs beyond its image, command and claim; the
// zero value is what most jobs have.
type JobOptions struct {
	// Network gives the job the host's rootless network (pasta or
	// slirp4netns) instead of none; only in a pool that allows it.
	Network bool `json:"network,omitempty"`
	// WorkingDir is the container's working directory (absolute); empty:
	// the image's.
	WorkingDir string `json:"working_dir,omitempty"`
	// ScratchMiB sizes a tmpfs at /scratch, its bound enforced by the
	// kernel; its pages count toward the job's memory, so it fits in the
	// memory claim. 0: no /scratch.
	ScratchMiB int64 `json:"scratch_mib,omitempty"`
	// Inputs are fetched into /inputs before the job starts; Outputs are
	// uploaded from /outputs after it exits (runnerapi.CheckInputs,
	// CheckOutputs).
	Inputs  []runnerapi.JobInput  `json:"inputs,omitempty"`
	Outputs []runnerapi.JobOutput `json:"outputs,omitempty"`
	// DataMiB bounds the inputs' bytes on the runner (claim.dataMiB).
	DataMiB int64 `json:"data_mib,omitempty"`
	// Selector is the label selector a runner's labels must meet, parsed
	// (runnerapi.ParseSelector); the claim reads it as options->'selector'.
	Selector []runnerapi.Requirement `json:"selector,omitempty"`
	// Stdio is the job's mode; "" (left out of the document) is LOGS, so
	// that a batch job's options read as before. The claim reads it as
	// options->>'stdio': only a runner whose agent runs the mode takes it.
	Stdio runnerapi.Stdio `json:"stdio,omitempty"`
	// IdleTimeoutSeconds, of a TTY or PIPE job: how long it may go
	// without a byte in either direction; 0: no bound.
	IdleTimeoutSeconds int `json:"idle_timeout_seconds,omitempty"`
}

// IsZero: the options are what most jobs have (stored as NULL).
func (o JobOptions) IsZero() bool { return o.Equal(JobOptions{}) }

// Equal compares two jobs' options.
func (o JobOptions) Equal(p JobOptions) bool {
	return o.Network == p.Network && o.WorkingDir == p.WorkingDir && o.ScratchMiB == p.ScratchMiB && o.DataMiB == p.DataMiB &&
		slices.Equal(o.Inputs, p.Inputs) && slices.Equal(o.Outputs, p.Outputs) && runnerapi.EqualSelectors(o.Selector, p.Selector) &&
		o.Stdio == p.Stdio && o.IdleTimeoutSeconds == p.IdleTimeoutSeconds
}

// Job is a unit of work in a pool.
type Job struct {
	ID     uuid.UUID
	PoolID uuid.UUID
	// SubmittedFor is the organisation of a job an organisation submitted
	// to a platform pool; nil for every other job, whose organisation is
	// its pool's.
	SubmittedFor   *uuid.UUID
	SubmittedBy    *uuid.UUID
	Image          string
	Command        []string
	Env            map[string]string
	Claim          Claim
	Options        JobOptions
	Priority       int
	MaxAttempts    int
	IdempotencyKey *string
	Kind           string
	State          JobState
	StateReason    string
	Attempt        int
	// Undelivered counts the attempts whose lease never reached the runner
	// (the store's ReturnUndelivered): taken numbers, but not tries.
	Undelivered     int
	RunnerID        *uuid.UUID
	LeaseExpiresAt  *time.Time
	AvailableAt     time.Time
	CancelRequested bool
	SubmittedAt     time.Time
	FinishedAt      *time.Time
}

// Tries is how many attempts reached a runner: what maxAttempts bounds.
func (j Job) Tries() int { return Tries(j.Attempt, j.Undelivered) }

// Tries is how many of the attempt numbers a job has taken reached a
// runner, when undelivered of them never did. Only the first
// maxUndelivered of those are forgiven, so a job whose answers keep getting
// lost still comes to an end.
func Tries(attempt, undelivered int) int { return attempt - min(undelivered, maxUndelivered) }

const maxUndelivered = 3

// JobFilter narrows a job listing.
type JobFilter struct {
	PoolID *uuid.UUID
	State  *JobState
	Kind   *string
	// SubmittedAfter (inclusive) and SubmittedBefore bound the submission
	// time.
	SubmittedAfter, SubmittedBefore *time.Time
}

// RunFilter narrows a listing of runs across jobs.
type RunFilter struct {
	OrganisationID *uuid.UUID
	PoolID         *uuid.UUID
}

// JobEvent is one recorded change of a job.
type JobEvent struct {
	ID       int64
	At       time.Time
	Type     string
	Attempt  int
	RunnerID *uuid.UUID
	Detail   string
}

// JobRun is one attempt: where it ran and how it ended.
type JobRun struct {
	JobID         uuid.UUID
	Attempt       int
	RunnerID      uuid.UUID
	RunnerName    string
	LeasedAt      time.Time
	FinishedAt    *time.Time
	ExitCode      *int
	ReturnReason  *string
	HostFault     bool
	OOM           bool
	PeakMemoryMiB *int64
	ImageDigest   *string
	RunnerVersion *string
	// Data is what the attempt fetched and uploaded, as its result
	// attested it (nil for jobs without data).
	Data *RunData
}

// RunData is an attempt's inputs and outputs, hashed (job_runs.data).
type RunData struct {
	Inputs  []runnerapi.InputRecord  `json:"inputs,omitempty"`
	Outputs []runnerapi.OutputRecord `json:"outputs,omitempty"`
}

// LogChunk is one stored piece of output.
type LogChunk struct {
	Attempt int
	Seq     int
	Data    []byte
}

// JobOutput is the end of a job's output, in order, and the size of all
// of it.
type JobOutput struct {
	Chunks []LogChunk
	Bytes  int64
}

// Hold keeps some of a runner's GPUs free of new work until it is released
// or runs out.
type Hold struct {
	ID         uuid.UUID
	RunnerID   uuid.UUID
	GPUs       int
	Reason     string
	Until      time.Time
	CreatedBy  *uuid.UUID
	CreatedAt  time.Time
	ReleasedAt *time.Time
}

// PoolQueue is a pool's queue depth and held GPUs.
type PoolQueue struct {
	Queued   int64
	HeldGPUs int64
}

// ClaimRequest is what a runner may take.
type ClaimRequest struct {
	RunnerID            uuid.UUID
	Kinds               []string
	Free                Claim // what the runner says it has free now
	Largest             Claim // the largest job it will run
	DefaultLeaseSeconds int
	// SpecBytes bounds the leased jobs' image, command and env together,
	// as text (at least what submission counted): an answer carrying
	// them stays within what the runner reads. Zero: no bound.
	SpecBytes int64
	// MaxHeld bounds the jobs the runner holds at once, these and those
	// it held already. Zero: no bound.
	MaxHeld int
	// UnavailableImages: no job naming one of these is leased.
	UnavailableImages []string
	// Stdio are the interactive modes the runner's agent runs: a TTY or
	// PIPE job is leased only in one of them (none: batch jobs only).
	Stdio []runnerapi.Stdio
	// WaitSeconds is how long the runner will wait for work if this claim
	// finds none: while it waits, a job it would take and that strands
	// less on it than on another runner is left to it. Zero: it will not
	// wait.
	WaitSeconds int
	Now         *time.Time // nil: the database's clock
}

// Outcome is how an attempt ended, as its runner reports it.
type Outcome struct {
	JobID    uuid.UUID
	Attempt  int
	RunnerID uuid.UUID
	// ExitCode, when the job's process ran to an end; otherwise
	// ReturnReason says why the runner gives the job back.
	ExitCode      *int
	ReturnReason  *string
	HostFault     bool
	OOM           bool
	PeakMemoryMiB *int64
	ImageDigest   *string // an empty one is none
	RunnerVersion *string // an empty one is none
	// Data: what the attempt fetched and uploaded (nil: none).
	Data *RunData
}

// JobSession is one person's session on a running job (attach or exec):
// who, what, when, and bytes each way as of its end. Never its bytes.
type JobSession struct {
	ID        uuid.UUID
	JobID     uuid.UUID
	Attempt   int
	AdminID   *uuid.UUID
	AdminName string
	Kind      string   // runnerapi.SessionAttach or SessionExec
	Command   []string // exec's
	StartedAt time.Time
	// EndedAt is nil while it is open (or when the replica relaying it
	// stopped before it could say).
	EndedAt  *time.Time
	BytesIn  int64
	BytesOut int64
	EndCode  string // runnerapi.SessionEnd's code; "" while open
}
