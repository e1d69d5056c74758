// Package runnerapi is the wire format between runmesh-agent and the
// control plane's runner listener: JSON over HTTPS, mutual TLS on every
// route but enrolment. It imports only the standard library, so the agent
// can use it without linking anything of the server.
package runnerapi

import (
	"fmt"
	"strconv"
	"time"
)

// Paths on the runner listener.
const (
	PathEnrol  = "/v1/enrol"
	PathWhoAmI = "/v1/whoami"
)

// PathWait is where a pending runner long-polls for its decision.
func PathWait(runnerID string) string { return "/v1/enrol/" + runnerID + "/wait" }

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 64 << 10

// EnrolRequest asks to join the pool the token belongs to.
type EnrolRequest struct {
	// Token is the single-use enrolment token an administrator created.
	Token string `json:"token"`
	// Name is how the runner calls itself (usually its host name).
	Name string `json:"name"`
	// PublicKey is the raw 32-byte Ed25519 key.
	PublicKey []byte `json:"public_key"`
	// CSR is a PEM certificate request signed by that key.
	CSR string `json:"csr"`
	// Capacity is what the runner measured: what the administrator sees,
	// and approves, with the runner.
	Capacity Capacity `json:"capacity"`
}

// EnrolResponse says who the runner now is.
type EnrolResponse struct {
	RunnerID string `json:"runner_id"`
	// Fingerprint is the key fingerprint as the server computed it: the
	// string the administrator compares with the runner host's.
	Fingerprint string `json:"fingerprint"`
	Status      string `json:"status"`
}

// WaitRequest is signed with the runner's key: only the key's holder learns
// its fate.
type WaitRequest struct {
	Timestamp   time.Time `json:"timestamp"`
	Signature   []byte    `json:"signature"`
	WaitSeconds int       `json:"wait_seconds"`
}

// MaxWaitSeconds bounds one long-poll.
const MaxWaitSeconds = 60

// WaitMessage is what a WaitRequest's signature covers.
func WaitMessage(runnerID string, ts time.Time) []byte {
	return []byte("runmesh-enrol-wait/v1\n" + runnerID + "\n" + strconv.FormatInt(ts.UnixNano(), 10))
}

// Runner statuses.
const (
	StatusPending  = "PENDING"
	StatusApproved = "APPROVED"
	StatusRejected = "REJECTED"
	StatusRevoked  = "REVOKED"
)

// WaitResponse is the runner's status; an approved runner gets its
// certificate chain (leaf first, PEM) with it.
type WaitResponse struct {
	Status           string `json:"status"`
	Reason           string `json:"reason,omitempty"`
	CertificateChain string `json:"certificate_chain,omitempty"`
}

// WhoAmIResponse is the caller as the server sees it.
type WhoAmIResponse struct {
	RunnerID            string    `json:"runner_id"`
	Name                string    `json:"name"`
	PoolID              string    `json:"pool_id"`
	OrganisationID      string    `json:"organisation_id,omitempty"`
	CertificateSerial   string    `json:"certificate_serial"`
	CertificateNotAfter time.Time `json:"certificate_not_after"`
}

// Error is every refusal's body.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody carries a stable code and a message for people. It is also
// the error with which the control plane's domain refuses a runner's
// request, so that the code it decides on is the code the runner reads.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *ErrorBody) Error() string { return e.Code + ": " + e.Message }

// Refuse is the refusal with code and the message format makes.
func Refuse(code, format string, args ...any) error {
	return &ErrorBody{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error codes.
const (
	CodeBadRequest      = "bad_request"
	CodeTooLarge        = "too_large"
	CodeTokenRefused    = "token_refused"
	CodeInvalidKey      = "invalid_key"
	CodeInvalidCSR      = "invalid_csr"
	CodeConflict        = "conflict"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeRetry           = "retry"
	CodeNotFound        = "not_found"
	CodeInternal        = "internal"
	// CodeTooMany: the peer has too many requests in flight without a
	// client certificate; try again after Retry-After.
	CodeTooMany = "too_many_requests"
)
