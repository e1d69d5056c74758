// Package agent is the runner agent's API: Run is the daemon, and Enrol,
// Fingerprint, Status and Capacity are what runmesh-agent's other commands
// do. Config is what they run with; LoadConfig reads its file.
//
// The daemon's life is here: the survivor check and the READY gate before
// any work, the drain a stop signal starts, and the wiring of the parts
// under internal/ (identity, enrolment, the runner API client, capacity,
// the job runtime, the worker that holds leases, heartbeats, renewal,
// metrics). Its health is one registry of named conditions
// (internal/health), each set by the part that knows the answer: every
// heartbeat carries them, and sd_notify STATUS= summarises them. The agent
// talks to the control plane only over the runner API; it links nothing of
// the server (cmd/runmesh-agent's deps test names what it must not, and
// why).
package agent
