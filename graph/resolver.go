// Package graph is the GraphQL admin API: schema-first with gqlgen
// (generated code in generated/ and model/), resolvers in *.resolvers.go,
// authorisation in the @hasRole directive and in store scopes, related
// objects through per-request dataloaders.
package graph

import (
	"log/slog"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/internal/health"
)

// Defaults are the server-wide values a pool uses until it sets its own.
type Defaults struct {
	LeaseSeconds      int
	QueueTimeoutHours int
}

// DefaultDefaults are DESIGN.md's defaults.
var DefaultDefaults = Defaults{LeaseSeconds: 30, QueueTimeoutHours: 24}

// Resolver holds what every resolver needs.
type Resolver struct {
	Store         *store.Store
	Log           *slog.Logger
	Defaults      Defaults
	Enrolment     *enrolment.Service
	CAFingerprint string
	// Listener wakes subscriptions.
	Listener *store.Listener
	// Health is the serving replica's registry (nil: no conditions).
	Health *health.Registry
}
