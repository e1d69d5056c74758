package graph

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vikstrous/dataloadgen"

	"github.com/runmesh/runmesh/controlplane/record"
)

// loaders batch the lookups of one request: a list of N pools costs one
// query for their organisations, not N. They live for one request, so
// nothing is cached across callers with different scopes.
type loaders struct {
	organisation        *dataloadgen.Loader[uuid.UUID, record.Organisation]
	pool                *dataloadgen.Loader[uuid.UUID, record.Pool]
	poolsOfOrganisation *dataloadgen.Loader[uuid.UUID, []record.Pool]
	certificate         *dataloadgen.Loader[uuid.UUID, record.Certificate] // newest, by runner
	runnerSeen          *dataloadgen.Loader[uuid.UUID, time.Time]          // by pool
	booking             *dataloadgen.Loader[uuid.UUID, record.Booking]     // by runner
	poolQueue           *dataloadgen.Loader[uuid.UUID, record.PoolQueue]   // by pool
	// By job; only jobs the caller already read through its scope reach
	// these.
	jobEvents *dataloadgen.Loader[uuid.UUID, []record.JobEvent]
	jobRuns   *dataloadgen.Loader[uuid.UUID, []record.JobRun]
	sessions  *dataloadgen.Loader[uuid.UUID, []record.JobSession]
	jobLogs   *dataloadgen.Loader[uuid.UUID, record.JobOutput]
	// Inside the caller's scope: admins (who made a hold or a token), jobs
	// (of runs listed across jobs).
	admin *dataloadgen.Loader[uuid.UUID, record.Admin]
	job   *dataloadgen.Loader[uuid.UUID, record.Job]
	// Of admins, runners and pools the caller already read through its
	// scope.
	adminTokens *dataloadgen.Loader[uuid.UUID, []record.AdminToken]
	runnerHolds *dataloadgen.Loader[uuid.UUID, []record.Hold] // in force
	poolHolds   *dataloadgen.Loader[uuid.UUID, []record.Hold]
	// logsLeft is what is left of this answer's logsBudget.
	logsLeft atomic.Int64
}

type loadersKey struct{}

func newLoaders(r *Resolver, scope record.Scope) *loaders {
	wait := dataloadgen.WithWait(time.Millisecond)
	l := &loaders{
		organisation: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]record.Organisation, error) {
			return r.Tenancy.OrganisationsByID(ctx, scope, ids)
		}, wait),
		pool: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]record.Pool, error) {
			return r.Tenancy.PoolsByID(ctx, scope, ids)
		}, wait),
		// Only organisations the caller already loaded (through its scope)
		// reach here; tenancy checks the scope all the same.
		poolsOfOrganisation: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.Pool, error) {
			return r.Tenancy.PoolsOfOrganisations(ctx, scope, ids)
		}, wait),
		// Only runners the caller already loaded through its scope reach
		// the certificate and booking loaders.
		certificate: dataloadgen.NewMappedLoader(r.Enrolment.LatestCertificates, wait),
		booking:     dataloadgen.NewMappedLoader(r.Fleet.Bookings, wait),
		// Pools reach here only through the caller's scope, too.
		runnerSeen: dataloadgen.NewMappedLoader(r.Fleet.RunnerSeen, wait),
		poolQueue:  dataloadgen.NewMappedLoader(r.Queue.PoolQueues, wait),
		jobEvents:  dataloadgen.NewMappedLoader(r.Queue.EventsOfJobs, wait),
		jobRuns:    dataloadgen.NewMappedLoader(r.Queue.RunsOfJobs, wait),
		sessions:   dataloadgen.NewMappedLoader(r.Queue.SessionsOfJobs, wait),
		admin: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]record.Admin, error) {
			return r.Tenancy.AdminsByID(ctx, scope, ids)
		}, wait),
		job: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]record.Job, error) {
			return r.Queue.JobsByID(ctx, scope, ids)
		}, wait),
		adminTokens: dataloadgen.NewMappedLoader(r.Tenancy.TokensOfAdmins, wait),
		runnerHolds: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.Hold, error) {
			return r.Queue.HoldsOfRunners(ctx, ids, false)
		}, wait),
		poolHolds: dataloadgen.NewMappedLoader(r.Queue.HoldsOfPools, wait),
	}
	// The logs of all the jobs one answer asks for share logsBudget,
	// whichever batches they come in.
	l.logsLeft.Store(logsBudget)
	l.jobLogs = dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]record.JobOutput, error) {
		out, err := r.Queue.OutputOfJobs(ctx, ids, logsTail(len(ids), l.logsLeft.Load()))
		for _, o := range out {
			for _, c := range o.Chunks {
				l.logsLeft.Add(-int64(len(c.Data)))
			}
		}
		return out, err
	}, wait)
	return l
}

func loadersFor(ctx context.Context) *loaders {
	return ctx.Value(loadersKey{}).(*loaders)
}

// prefetchRunners loads, in one batch each, what the selected fields of a
// runner list will ask for. Per-item loads alone batch only what arrives
// within the loader's wait, and a long list on a busy host straddles
// several waits; after this they all find their value cached.
func prefetchRunners(ctx context.Context, runners []record.Runner) {
	l := loadersFor(ctx)
	op := graphql.GetOperationContext(ctx)
	var runnerIDs, poolIDs, orgIDs []uuid.UUID
	seenPool, seenOrg := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	for _, r := range runners {
		runnerIDs = append(runnerIDs, r.ID)
		if !seenPool[r.PoolID] {
			seenPool[r.PoolID] = true
			poolIDs = append(poolIDs, r.PoolID)
		}
		if r.OrganisationID != nil && !seenOrg[*r.OrganisationID] {
			seenOrg[*r.OrganisationID] = true
			orgIDs = append(orgIDs, *r.OrganisationID)
		}
	}
	for _, f := range nodeFields(ctx) {
		switch f.Name {
		case "certificate":
			l.certificate.LoadAllThunk(ctx, runnerIDs)
		case "booked":
			l.booking.LoadAllThunk(ctx, runnerIDs)
		case "organisation":
			l.organisation.LoadAllThunk(ctx, orgIDs)
		case "holds":
			l.runnerHolds.LoadAllThunk(ctx, runnerIDs)
		case "pool":
			for _, sub := range graphql.CollectFields(op, f.Selections, nil) {
				switch sub.Name {
				case "organisation":
					// A pool's organisation is its runners' organisation.
					l.organisation.LoadAllThunk(ctx, orgIDs)
				case "runnerSeen":
					l.runnerSeen.LoadAllThunk(ctx, poolIDs)
				}
			}
			l.pool.LoadAllThunk(ctx, poolIDs)
		}
	}
}

// nodeFields are the fields a connection's query selects of its items:
// under nodes, and under edges' node.
func nodeFields(ctx context.Context) []graphql.CollectedField {
	op := graphql.GetOperationContext(ctx)
	var out []graphql.CollectedField
	for _, f := range graphql.CollectFieldsCtx(ctx, nil) {
		switch f.Name {
		case "nodes":
			out = append(out, graphql.CollectFields(op, f.Selections, nil)...)
		case "edges":
			for _, e := range graphql.CollectFields(op, f.Selections, nil) {
				if e.Name == "node" {
					out = append(out, graphql.CollectFields(op, e.Selections, nil)...)
				}
			}
		}
	}
	return out
}

// prefetchJobs loads, in one statement each, the events, runs and logs a
// job list selects.
func prefetchJobs(ctx context.Context, jobs []record.Job) {
	l := loadersFor(ctx)
	ids := make([]uuid.UUID, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	for _, f := range nodeFields(ctx) {
		switch f.Name {
		case "events":
			l.jobEvents.LoadAllThunk(ctx, ids)
		case "runs":
			l.jobRuns.LoadAllThunk(ctx, ids)
		case "logs":
			l.jobLogs.LoadAllThunk(ctx, ids)
		case "sessions":
			l.sessions.LoadAllThunk(ctx, ids)
		}
	}
}

// LogsTailBytes bounds a job's logs in one answer: the last MiB or so.
// The jobLogs subscription streams all of it.
const LogsTailBytes = 1 << 20

// logsBudget bounds the logs of all the jobs one answer asks for at once,
// and minLogsTail what each job gets of it however many there are.
const logsBudget, minLogsTail = 64 << 20, 64 << 10

// logsTail is how much of each job's output a batch of n jobs gets, with
// left of the answer's logsBudget still unspent: the last MiB, or an even
// share of what is left, but at least 64 KiB (two whole chunks, so the last
// chunk always shows). A list of 500 jobs with long output is then 64 MiB
// of logs, not half a GiB.
func logsTail(n int, left int64) int64 {
	return max(min(LogsTailBytes, left/int64(max(n, 1))), minLogsTail)
}

// logsPage is how many chunks (of at most 32 KiB) a jobLogs subscription
// reads at a time.
const logsPage = 64

// LogsCutNote opens logs that do not start at the beginning.
const LogsCutNote = "[runmesh: %d earlier bytes not shown here; the jobLogs subscription streams all of the output]\n"
