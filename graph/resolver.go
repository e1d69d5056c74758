// Package graph is the GraphQL admin API: schema-first with gqlgen
// (generated code in generated/ and model/), resolvers in *.resolvers.go,
// authorisation in the @hasRole directive and in the domain packages'
// scopes, related objects through per-request dataloaders. It speaks to
// the domain packages (tenancy, queue, fleet, enrolment), never to the
// store.
package graph

import (
	"log/slog"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/tenancy"
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
	Tenancy       *tenancy.Service
	Queue         *queue.Service
	Fleet         *fleet.Service
	Enrolment     *enrolment.Service
	Log           *slog.Logger
	Defaults      Defaults
	CAFingerprint string
	// Health is the serving replica's registry (nil: no conditions).
	Health *health.Registry
	// Version is the serving replica's.
	Version string
	// Storage is the jobs' object storage (nil: none configured).
	Storage *objects.Bucket
}
