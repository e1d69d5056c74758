package runnerapi

// PathLeases is where a runner asks for work.
const PathLeases = "/v1/leases"

// PathLeaseLogs is where a runner uploads a lease's output.
func PathLeaseLogs(leaseID string) string { return "/v1/leases/" + leaseID + "/logs" }

// PathLeaseResult is where a runner reports how a lease ended.
func PathLeaseResult(leaseID string) string { return "/v1/leases/" + leaseID + "/result" }

// Resources is an amount of what jobs claim.
type Resources struct {
	Cores     float64 `json:"cores"`
	MemoryMiB int64   `json:"memory_mib"`
	GPUs      int     `json:"gpus"`
}

// LeaseRequest asks for work that fits.
type LeaseRequest struct {
	Kinds []string `json:"kinds"`
	// Largest is the largest job the runner will run.
	Largest Resources `json:"largest"`
	// Free is what the runner has free now.
	Free Resources `json:"free"`
	// Max is how many jobs one answer may carry (default 1).
	Max int `json:"max"`
	// WaitSeconds long-polls for work when there is none.
	WaitSeconds int `json:"wait_seconds"`
}

// MaxLeasesPerRequest bounds LeaseRequest.Max.
const MaxLeasesPerRequest = 16

// Lease is a job the runner now holds, at an attempt.
type Lease struct {
	LeaseID          string            `json:"lease_id"`
	Attempt          int               `json:"attempt"`
	Image            string            `json:"image"`
	Command          []string          `json:"command"`
	Env              map[string]string `json:"env"`
	Claim            Resources         `json:"claim"`
	WallClockSeconds int               `json:"wall_clock_seconds"`
	Kind             string            `json:"kind"`
	LeaseSeconds     int               `json:"lease_seconds"`
}

// LeaseResponse carries the leases granted (none when the wait ran out).
type LeaseResponse struct {
	Leases []Lease `json:"leases"`
}

// Lease phases a heartbeat reports.
const (
	PhaseStarting = "STARTING"
	PhaseRunning  = "RUNNING"
)

// HeldLease is a lease the runner reports holding.
type HeldLease struct {
	LeaseID string `json:"lease_id"`
	Attempt int    `json:"attempt"`
	Phase   string `json:"phase"`
}

// What the server says of each held lease.
const (
	LeaseContinue = "CONTINUE"
	LeaseCancel   = "CANCEL"
	LeaseGone     = "GONE"
)

// LeaseAnswer is the server's word on one held lease.
type LeaseAnswer struct {
	LeaseID string `json:"lease_id"`
	Attempt int    `json:"attempt"`
	Action  string `json:"action"`
}

// LogUpload is one chunk of a lease's output.
type LogUpload struct {
	Attempt int    `json:"attempt"`
	Seq     int    `json:"seq"`
	Data    []byte `json:"data"`
}

// MaxLogChunk bounds one chunk.
const MaxLogChunk = 32 << 10

// ResultRequest says how an attempt ended: ExitCode when the job's process
// ran to an end, otherwise ReturnReason (the runner gives the job back).
type ResultRequest struct {
	Attempt       int     `json:"attempt"`
	ExitCode      *int    `json:"exit_code,omitempty"`
	ReturnReason  *string `json:"return_reason,omitempty"`
	HostFault     bool    `json:"host_fault,omitempty"`
	OOM           bool    `json:"oom,omitempty"`
	PeakMemoryMiB *int64  `json:"peak_memory_mib,omitempty"`
	ImageDigest   *string `json:"image_digest,omitempty"`
	RunnerVersion *string `json:"runner_version,omitempty"`
}

// ResultResponse is the job's state after the result.
type ResultResponse struct {
	State string `json:"state"`
}

// CodeStaleAttempt: a report for an attempt that is no longer the runner's.
const CodeStaleAttempt = "stale_attempt"
