package queue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// desk is the queue over the shared database, its listener running, and
// one pool, of an organisation of its own, with an approved runner whose
// agent proved its survivor check: what the runner side needs.
type desk struct {
	db     *pgxpool.Pool
	st     *store.Store
	q      *Service
	leases *Leases
	org    record.Organisation
	pool   record.Pool
	runner record.Runner
	// agent is the instance whose proof the server holds.
	agent string
}

// deskOptions shape a desk: the pool a platform pool (no organisation),
// with its own lease or none.
type deskOptions struct {
	platform     bool
	leaseSeconds *int
	leases       LeasesOptions
}

func newDesk(t *testing.T, o deskOptions) *desk {
	t.Helper()
	ctx := context.Background()
	db := storetest.SharedPool(t)
	st := store.New(db)
	l := store.NewListener(db, slog.New(slog.DiscardHandler))
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	d := &desk{db: db, st: st, q: NewService(st, l), agent: uuid.NewString()}
	var err error
	d.org, err = st.CreateOrganisation(ctx, "org-"+uuid.NewString()[:8])
	require.NoError(t, err)
	np := record.NewPool{OrganisationID: &d.org.ID, Name: "gpu-" + uuid.NewString()[:8], LeaseSeconds: o.leaseSeconds,
		AllowNetwork: true, AllowUnenforcedMemory: true}
	if o.platform {
		np.OrganisationID = nil
	}
	d.pool, err = st.CreatePool(ctx, np)
	require.NoError(t, err)
	id := storetest.ApprovedRunner(t, st, d.pool.ID, 8, 65536, 0)
	proof, err := json.Marshal(runnerapi.RecoveryProof{AgentInstance: d.agent, SurvivorsChecked: true, Isolated: true})
	require.NoError(t, err)
	require.NoError(t, st.RecordRecovery(ctx, id, proof))
	d.runner, err = st.Runner(ctx, record.AllOrganisations(), id)
	require.NoError(t, err)
	d.leases = d.q.Leases(o.leases)
	return d
}

// submit queues a job in the desk's pool inside scope, f changing the
// smallest one.
func (d *desk) submit(t *testing.T, scope record.Scope, f func(*Submission)) record.Job {
	t.Helper()
	sub := submission(f)
	sub.PoolID = d.pool.ID
	j, _, err := d.q.Submit(context.Background(), scope, sub)
	require.NoError(t, err)
	return j
}

// request is what the desk's agent asks: default jobs, up to max, room
// for any of them, waiting wait seconds.
func (d *desk) request(max, wait int) runnerapi.LeaseRequest {
	room := runnerapi.Resources{Cores: 8, MemoryMiB: 65536}
	return runnerapi.LeaseRequest{Kinds: []string{"default"}, Max: max, WaitSeconds: wait, Free: room, Largest: room, AgentInstance: d.agent}
}

// ask asks for work as the desk's runner, bounded by ten seconds.
func (d *desk) ask(t *testing.T, req runnerapi.LeaseRequest) ([]runnerapi.Lease, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.leases.AskForWork(ctx, d.runner, req)
}

// leased asks for n leases and requires them.
func (d *desk) leased(t *testing.T, n int) []runnerapi.Lease {
	t.Helper()
	got, err := d.ask(t, d.request(n, 0))
	require.NoError(t, err)
	require.Len(t, got, n)
	return got
}

func (d *desk) job(t *testing.T, id uuid.UUID) record.Job {
	t.Helper()
	j, err := d.st.Job(context.Background(), record.AllOrganisations(), id)
	require.NoError(t, err)
	return j
}

func (d *desk) waiting(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, d.db.QueryRow(context.Background(), `SELECT count(*) FROM runner_waits WHERE runner_id = $1`, d.runner.ID).Scan(&n))
	return n
}

// refusedWith requires err to be the runner API's refusal with code.
func refusedWith(t *testing.T, err error, code string) {
	t.Helper()
	var body *runnerapi.ErrorBody
	require.True(t, errors.As(err, &body), "%v is not a refusal", err)
	require.Equal(t, code, body.Code, body.Message)
}
