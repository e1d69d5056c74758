package graph

import (
	"context"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/graph/generated"
)

// What a query costs (its complexity, against Options.ComplexityLimit): a
// field 1, and a list field what one element of it costs times the number
// of elements it can hold. That is its page size where it has one (first),
// and otherwise the size a list of its kind is expected to reach: lists
// nest (organisations { pools { organisation { pools ... } } }), and each
// level multiplies what the answer holds.
const (
	expectedOrganisations = 50  // organisations, and pools of an organisation
	expectedRunners       = 200 // runners of a query
	expectedEvents        = 10  // a job's events
	expectedRuns          = 4   // a job's runs (one an attempt)
	expectedSessions      = 4   // a job's sessions (attach, exec)
	expectedPerRunner     = 8   // a runner's GPUs, labels, health conditions
	expectedHealth        = 10  // the server's health conditions
	// A job's output tail, and its command and environment names, are
	// bounded strings and lists: each costs as much as a few fields.
	bulkyField = 5
)

// list is the cost of a list of n elements each costing child.
func list(child, n int) int { return 1 + child*max(n, 1) }

func complexity() generated.ComplexityRoot {
	var c generated.ComplexityRoot
	c.Query.Jobs = func(child int, _ *uuid.UUID, _ *record.JobState, _ *string, _, _ *time.Time, first int, _ *string) int {
		return list(child, first)
	}
	c.Query.AuditLog = func(child int, _ *string, _ *uuid.UUID, first int, _ *string) int { return list(child, first) }
	c.Query.Admins = func(child int, _ *uuid.UUID, first int, _ *string) int { return list(child, first) }
	c.Query.EnrolmentTokens = func(child int, _ *uuid.UUID, _ *record.EnrolmentTokenState, first int, _ *string) int {
		return list(child, first)
	}
	c.Query.Runs = func(child int, _, _ *uuid.UUID, first int, _ *string) int { return list(child, first) }
	c.Query.Organisations = func(child int) int { return list(child, expectedOrganisations) }
	c.Query.Pools = func(child int, _ *uuid.UUID, _ *bool) int { return list(child, expectedOrganisations) }
	c.Query.Runners = func(child int, _ *uuid.UUID, _ *record.RunnerStatus, _ *string, first int, _ *string) int {
		return list(child, first)
	}
	c.Query.Health = func(child int) int { return list(child, expectedHealth) }
	c.Organisation.Pools = func(child int) int { return list(child, expectedOrganisations) }
	c.Job.Events = func(child int, first int, _ *string) int { return list(child, min(first, expectedEvents)) }
	c.Job.Runs = func(child int) int { return list(child, expectedRuns) }
	c.Job.Sessions = func(child int) int { return list(child, expectedSessions) }
	c.Job.Logs = func(int) int { return bulkyField }
	c.Job.Command = func(int) int { return bulkyField }
	c.Job.EnvNames = func(int) int { return bulkyField }
	c.Runner.Gpus = func(child int) int { return list(child, expectedPerRunner) }
	c.Runner.Labels = func(child int) int { return list(child, expectedPerRunner) }
	c.Runner.Health = func(child int) int { return list(child, expectedPerRunner) }
	c.Runner.Runs = func(child int, first int, _ *string) int { return list(child, first) }
	c.Runner.Holds = func(child int, _ bool) int { return list(child, expectedPerRunner) }
	c.Pool.Holds = func(child int) int { return list(child, expectedPerRunner) }
	c.Admin.Tokens = func(child int) int { return list(child, expectedPerRunner) }
	// A connection's nodes and edges wrap its items at no cost of their
	// own: the page size (first) prices the list.
	c.JobConnection.Nodes, c.JobConnection.Edges, c.JobEdge.Node = same, same, same
	c.RunnerConnection.Nodes, c.RunnerConnection.Edges, c.RunnerEdge.Node = same, same, same
	c.JobRunConnection.Nodes, c.JobRunConnection.Edges, c.JobRunEdge.Node = same, same, same
	c.JobEventConnection.Nodes, c.JobEventConnection.Edges, c.JobEventEdge.Node = same, same, same
	c.AuditEntryConnection.Nodes, c.AuditEntryConnection.Edges, c.AuditEntryEdge.Node = same, same, same
	c.AdminConnection.Nodes, c.AdminConnection.Edges, c.AdminEdge.Node = same, same, same
	c.EnrolmentTokenConnection.Nodes, c.EnrolmentTokenConnection.Edges, c.EnrolmentTokenEdge.Node = same, same, same
	return c
}

func same(child int) int { return child }

// DefaultMaxDepth bounds how deeply a query's selections nest (the
// introspection system fields, which nest by their nature, are not
// counted).
const DefaultMaxDepth = 10

// depthLimit refuses, before anything runs, an operation whose selections
// nest deeper than max.
type depthLimit struct{ max int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = depthLimit{}

func (depthLimit) ExtensionName() string                   { return "DepthLimit" }
func (depthLimit) Validate(graphql.ExecutableSchema) error { return nil }
func (d depthLimit) MutateOperationContext(_ context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if rc.Operation == nil {
		return nil
	}
	if depth := selectionDepth(rc.Operation.SelectionSet, map[string]bool{}); depth > d.max {
		err := gqlerror.Errorf("query depth %d is over the limit of %d", depth, d.max)
		err.Extensions = map[string]any{"code": CodeBadInput}
		return err
	}
	return nil
}

// selectionDepth is how deeply set nests, through fragments (each fragment
// followed once on a path: validation has refused cycles already).
func selectionDepth(set ast.SelectionSet, onPath map[string]bool) int {
	deepest := 0
	for _, s := range set {
		var d int
		switch s := s.(type) {
		case *ast.Field:
			if len(s.Name) > 1 && s.Name[:2] == "__" {
				continue // introspection
			}
			d = 1 + selectionDepth(s.SelectionSet, onPath)
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, onPath)
		case *ast.FragmentSpread:
			if s.Definition == nil || onPath[s.Name] {
				continue
			}
			onPath[s.Name] = true
			d = selectionDepth(s.Definition.SelectionSet, onPath)
			delete(onPath, s.Name)
		}
		deepest = max(deepest, d)
	}
	return deepest
}
