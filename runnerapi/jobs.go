package runnerapi

import (
	"errors"
	"fmt"
	"math"
	"regexp"
)

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
	// AgentInstance is the asking agent's (RecoveryProof.AgentInstance):
	// work goes only to the instance whose survivor check the server has.
	AgentInstance string `json:"agent_instance"`
	// UnavailableImages are images the runner cannot run now (a pool
	// image it has not pulled yet, or could not): no job naming one is
	// leased to it.
	UnavailableImages []string `json:"unavailable_images,omitempty"`
	// Stdio names the interactive modes (TTY, PIPE) the agent runs: a job
	// in another mode is never leased to it. An agent from before
	// interactive jobs names none, and so is never handed one it would
	// run as a batch job.
	Stdio []Stdio `json:"stdio,omitempty"`
}

// MaxStdioModes bounds LeaseRequest.Stdio: each interactive mode once.
const MaxStdioModes = 2

// RecoveryProof is what an agent's survivor check found, sent in a
// heartbeat after every start and before it asks for work. Its claims are
// positive only: a missing or false claim never reads as a good one.
type RecoveryProof struct {
	// AgentInstance is random for every start of the agent.
	AgentInstance string `json:"agent_instance"`
	// BootID is the host's (/proc/sys/kernel/random/boot_id): a new one
	// says the host rebooted, and no job can have survived.
	BootID string `json:"boot_id"`
	// SurvivorsChecked: the agent listed its job units and containers.
	SurvivorsChecked bool `json:"survivors_checked"`
	// SurvivorsFound is how many jobs it found from before this start.
	SurvivorsFound int `json:"survivors_found"`
	// Adopted is how many of them the server still wanted, and the agent
	// now follows again; the rest were stopped.
	Adopted int `json:"adopted"`
	// Isolated: a second look found nothing running but the adopted jobs.
	Isolated bool `json:"isolated"`
}

// CodeRecoveryRequired: the agent asked for work before the server had its
// survivor check (or the check did not prove the runner isolated).
const CodeRecoveryRequired = "recovery_required"

// ValidKind reports whether k can name a job kind: lower case, at most 63
// characters. Jobs, runners' requests and the agent's config all use it.
func ValidKind(k string) bool { return kindName.MatchString(k) }

var kindName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// MaxKinds bounds the job kinds a runner runs (LeaseRequest.Kinds, and the
// agent's kinds setting).
const MaxKinds = 16

// MaxLeasesPerRequest bounds LeaseRequest.Max. (A runner with room for
// many small jobs takes them in few requests: each request's own cost, a
// claim and two round trips, is most of a small job's.)
const MaxLeasesPerRequest = 512

// MaxHeldLeases bounds the leases a runner holds at once: a heartbeat
// names every one (see MaxHeartbeatBodyBytes), and a claim takes no more
// than make up the difference.
const MaxHeldLeases = 2 * MaxLeasesPerRequest

// MaxHeartbeatBodyBytes bounds a heartbeat's body instead of MaxBodyBytes:
// room for its capacity, health and version, and 128 bytes for each of
// MaxHeldLeases leases (a lease is about 80 as JSON).
const MaxHeartbeatBodyBytes = MaxBodyBytes + MaxHeldLeases*128

// MaxJobSpecBytes bounds a job's image, command and env together, so that
// a lease answer stays under LeaseAnswerBytes.
const MaxJobSpecBytes = 64 << 10

// MaxAnswerSpecBytes bounds the specs in one lease answer together: an
// answer takes jobs best first while their specs fit, so that many small
// jobs go in one answer and large ones in several. It is 128 full specs,
// and always room for one.
const MaxAnswerSpecBytes = 128 * MaxJobSpecBytes

// LeaseAnswerBytes is the most an answer granting up to max leases can
// take: its specs, each byte escaped at worst to six (\u0000), with 4 KiB
// a lease for the rest.
func LeaseAnswerBytes(max int) int {
	return 6*min(max*MaxJobSpecBytes, MaxAnswerSpecBytes) + max*(4<<10)
}

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
	// Organisation (its handle; empty for the platform's own jobs) and
	// Pool (its name) say whose the job is: the agent labels the metrics
	// of the GPUs it holds with them.
	Organisation string `json:"organisation,omitempty"`
	Pool         string `json:"pool,omitempty"`
	// Network: the job gets the host's rootless network instead of none.
	Network bool `json:"network,omitempty"`
	// WorkingDir is the container's working directory; empty: the image's.
	WorkingDir string `json:"working_dir,omitempty"`
	// ScratchMiB sizes a tmpfs at /scratch; 0: none.
	ScratchMiB int64 `json:"scratch_mib,omitempty"`
	// Inputs are fetched into /inputs before the job starts, Outputs
	// uploaded from /outputs after it exits, each through its URL exactly
	// as given.
	Inputs  []LeaseInput  `json:"inputs,omitempty"`
	Outputs []LeaseOutput `json:"outputs,omitempty"`
	// DataMiB bounds the inputs' bytes together (claim.dataMiB).
	DataMiB int64 `json:"data_mib,omitempty"`
	// Stdio is the job's mode; left out for LOGS, so that a batch job's
	// lease reads as it did before interactive jobs. A TTY or PIPE job is
	// leased only to an agent that named its mode (LeaseRequest.Stdio).
	Stdio Stdio `json:"stdio,omitempty"`
	// IdleTimeoutSeconds, of a TTY or PIPE job: how long it may go
	// without a byte in either direction (0: no bound).
	IdleTimeoutSeconds int `json:"idle_timeout_seconds,omitempty"`
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

// MaxLogChunksPerAttempt bounds what the server keeps of one attempt's
// output: sequence numbers 0 to 2,047, at most 64 MiB. A chunk past it is
// refused with CodeLogLimit, and in its place a note that the rest was not
// kept is stored, once. One job that writes without end cannot fill the
// database.
const MaxLogChunksPerAttempt = 2048

// CodeLogLimit: the attempt's output is past MaxLogChunksPerAttempt; the
// runner sends no more of it.
const CodeLogLimit = "log_limit"

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
	// Inputs and Outputs attest what the attempt fetched and uploaded (in
	// the lease's order; outputs only of an attempt that exited 0).
	Inputs  []InputRecord  `json:"inputs,omitempty"`
	Outputs []OutputRecord `json:"outputs,omitempty"`
}

// MaxResultBodyBytes bounds one result's body (POST /v1/leases/{id}/result)
// instead of MaxBodyBytes: room for MaxInputs and MaxOutputs records with
// their keys, however escaped.
const MaxResultBodyBytes = MaxBodyBytes + (MaxInputs+MaxOutputs)*(6*(MaxKeyBytes+128+80)+256)

// PathResults is where a runner reports several attempts' ends at once.
const PathResults = "/v1/results"

// MaxResultsPerRequest bounds ResultsRequest.Results: the results of one
// lease answer fit in one request.
const MaxResultsPerRequest = MaxLeasesPerRequest

// MaxResultsBodyBytes bounds a results request's body instead of
// MaxBodyBytes: a result takes at most about 6.5 KiB as JSON (its return
// reason, digest and version each escaped at worst to six bytes a byte),
// so any MaxResultsPerRequest valid results fit.
const MaxResultsBodyBytes = MaxResultsPerRequest * 8 << 10

// LeaseResult is one lease's result in a batch.
type LeaseResult struct {
	LeaseID string `json:"lease_id"`
	ResultRequest
}

// ResultsRequest reports several results in one request and one
// transaction. Each is fenced on its own: a stale one is refused without
// touching the others.
type ResultsRequest struct {
	Results []LeaseResult `json:"results"`
}

// ResultsResponse answers each result, in the order sent: the job's state,
// or the refusal (stale_attempt).
type ResultsResponse struct {
	Results []ResultAnswer `json:"results"`
}

// ResultAnswer is the answer to one result of a batch.
type ResultAnswer struct {
	LeaseID string `json:"lease_id"`
	State   string `json:"state,omitempty"`
	// AlreadyRecorded: this attempt's result was accepted before (this
	// one changed nothing); State is the job's now.
	AlreadyRecorded bool       `json:"already_recorded,omitempty"`
	Error           *ErrorBody `json:"error,omitempty"`
}

// ResultResponse is the job's state after the result. AlreadyRecorded:
// the attempt's result was accepted before, and this one changed nothing.
type ResultResponse struct {
	State           string `json:"state"`
	AlreadyRecorded bool   `json:"already_recorded,omitempty"`
}

// MaxAttempt bounds an attempt number: the server keeps them as 32-bit
// integers, and no job is tried that often.
const MaxAttempt = math.MaxInt32

// CheckAttempt refuses an attempt no lease can have.
func CheckAttempt(a int) error {
	if a < 1 || a > MaxAttempt {
		return fmt.Errorf("attempt: 1 to %d", MaxAttempt)
	}
	return nil
}

// CodeStaleAttempt: a report for an attempt that is no longer the runner's.
const CodeStaleAttempt = "stale_attempt"

// CheckRecovery refuses a proof that could not be true: a malformed
// instance, more adopted than found, impossible counts.
func CheckRecovery(p RecoveryProof) error {
	if !isUUID(p.AgentInstance) {
		return errors.New("agent_instance: a UUID")
	}
	if err := CheckText("boot_id", p.BootID, 64); err != nil {
		return err
	}
	if p.SurvivorsFound < 0 || p.SurvivorsFound > 10000 || p.Adopted < 0 || p.Adopted > p.SurvivorsFound {
		return errors.New("survivors_found: 0 to 10000; adopted: 0 to survivors_found")
	}
	if !p.SurvivorsChecked && (p.SurvivorsFound != 0 || p.Adopted != 0 || p.Isolated) {
		return errors.New("survivors unchecked: nothing can have been found, adopted or isolated")
	}
	return nil
}

// Proves reports whether p lets the agent instance take work: it checked
// for survivors and found itself isolated.
func (p RecoveryProof) Proves(instance string) bool {
	return p.SurvivorsChecked && p.Isolated && p.AgentInstance != "" && p.AgentInstance == instance
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		default:
			return false
		}
	}
	return true
}
