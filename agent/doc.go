// Package agent is the runner: enrolment, identity, capacity, the job
// runtime and recovery. It talks to the control plane only over the runner
// API; it must never import the server's database or GraphQL code (see
// deps_test.go).
package agent
