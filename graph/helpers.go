package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/vikstrous/dataloadgen"

	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/graph/model"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// loadOrganisation resolves an optional organisation reference through the
// request's loader (nil stays nil: a platform object).
func loadOrganisation(ctx context.Context, id *uuid.UUID) (*store.Organisation, error) {
	if id == nil {
		return nil, nil
	}
	o, err := loadersFor(ctx).organisation.Load(ctx, *id)
	if errors.Is(err, dataloadgen.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// loadPool resolves a pool reference through the request's loader.
func loadPool(ctx context.Context, id uuid.UUID) (*store.Pool, error) {
	p, err := loadersFor(ctx).pool.Load(ctx, id)
	if errors.Is(err, dataloadgen.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func checkReason(reason string) error {
	if reason == "" || len(reason) > 500 {
		return badInputf("reason: 1 to 500 characters")
	}
	return nil
}

// nullIfNotFound turns "not found" into a null answer, so that something
// outside the caller's scope and something that does not exist look alike.
func nullIfNotFound[T any](v *T, err error) (*T, error) {
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// targetOrganisation is the organisation an admin acts on: the one named,
// which an organisation admin may name only as its own (another is "not
// found", like one that does not exist), or by default its own. Platform
// admins naming none get nil: the platform.
func targetOrganisation(me store.Admin, named *uuid.UUID) (*uuid.UUID, error) {
	if me.Role == store.RolePlatformAdmin {
		return named, nil
	}
	if me.OrganisationID == nil {
		return nil, errForbidden
	}
	if named != nil && *named != *me.OrganisationID {
		return nil, store.ErrNotFound
	}
	return me.OrganisationID, nil
}

var handle = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func checkHandle(field, v string) error {
	if !handle.MatchString(v) {
		return badInputf("%s: 1 to 63 lower-case letters, digits and dashes, not starting with a dash", field)
	}
	return nil
}

// Bounds of the pool settings; the schema's CHECK constraints say the same.
const (
	minLeaseSeconds, maxLeaseSeconds           = 5, 3600
	minQueueTimeoutHours, maxQueueTimeoutHours = 1, 8760
)

func checkPoolSettings(leaseSeconds, queueTimeoutHours *int) error {
	if v := leaseSeconds; v != nil && (*v < minLeaseSeconds || *v > maxLeaseSeconds) {
		return badInputf("leaseSeconds: between %d and %d", minLeaseSeconds, maxLeaseSeconds)
	}
	if v := queueTimeoutHours; v != nil && (*v < minQueueTimeoutHours || *v > maxQueueTimeoutHours) {
		return badInputf("queueTimeoutHours: between %d and %d", minQueueTimeoutHours, maxQueueTimeoutHours)
	}
	return nil
}

// derefOmittable is the value to validate: only a value actually given.
func derefOmittable(v *int, set bool) *int {
	if !set {
		return nil
	}
	return v
}

func setting(own *int, def int) *model.IntSetting {
	s := &model.IntSetting{Own: own, Default: def, InForce: def, IsDefault: own == nil}
	if own != nil {
		s.InForce = *own
	}
	return s
}

func runnerCapacity(c runnerapi.Capacity) *model.RunnerCapacity {
	out := &model.RunnerCapacity{
		Hostname: c.Host.Hostname, Cores: c.Host.Cores, MemoryMiB: int(c.Host.MemoryMiB),
		MemoryAvailableMiB: int(c.Host.MemoryAvailableMiB), DiskFreeMiB: int(c.Host.DiskFreeMiB),
		LimitedBy: c.Host.Limited,
	}
	if out.LimitedBy == nil {
		out.LimitedBy = []string{}
	}
	if c.GPUsUnavailable != "" {
		out.GpusUnavailable = &c.GPUsUnavailable
	}
	if c.DriverVersion != "" {
		out.DriverVersion = &c.DriverVersion
	}
	// An agent that says nothing about limits enforces none.
	silent := "the agent did not report which limits it enforces"
	out.Limits = &model.LimitEnforcement{Reason: &silent}
	if l := c.Limits; l != nil {
		out.Limits = &model.LimitEnforcement{Memory: l.Memory, CPU: l.CPU, Pids: l.Pids}
		if l.Reason != "" {
			out.Limits.Reason = &l.Reason
		}
	}
	return out
}

func labels(ls []runnerapi.Label) []model.Label {
	out := make([]model.Label, 0, len(ls))
	for _, l := range ls {
		src := model.LabelSourceDetected
		if l.Source == runnerapi.LabelDeclared {
			src = model.LabelSourceDeclared
		}
		out = append(out, model.Label{Key: l.Key, Value: l.Value, Source: src})
	}
	return out
}

// runnerHealth is what the runner's last heartbeat said of its health.
func runnerHealth(b []byte) ([]model.HealthCondition, error) {
	var in []runnerapi.Condition
	if len(b) > 0 {
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("runner health: %w", err)
		}
	}
	out := make([]model.HealthCondition, 0, len(in))
	for _, c := range in {
		out = append(out, model.HealthCondition{Name: c.Name, Ok: c.OK, Severity: c.Severity, Title: c.Title})
	}
	return out, nil
}

// serverHealth is the serving replica's conditions. Their texts can carry
// what only the platform's operators should see (database errors name
// hosts), so other admins get the verdicts alone.
func serverHealth(conds []health.Status, showText bool) []model.HealthCondition {
	out := make([]model.HealthCondition, 0, len(conds))
	for _, c := range conds {
		m := model.HealthCondition{Name: c.Name, Ok: c.OK, Severity: c.Severity.String(), Title: c.Title, Since: &c.Since}
		if showText {
			m.Text = &c.Text
		}
		out = append(out, m)
	}
	return out
}

func gpus(in []runnerapi.GPU) []model.GPU {
	out := make([]model.GPU, 0, len(in))
	for _, g := range in {
		m := model.GPU{
			Index: g.Index, UUID: g.UUID, Name: g.Name,
			MemoryTotalMiB: int(g.MemoryTotalMiB), MemoryUsedMiB: int(g.MemoryUsedMiB), MemoryFreeMiB: int(g.MemoryFreeMiB),
			UtilisationPercent: g.Utilisation, TemperatureC: g.TemperatureC, PowerWatts: g.PowerWatts, Healthy: g.Healthy,
		}
		if g.Health != "" {
			m.Health = &g.Health
		}
		out = append(out, m)
	}
	return out
}

// newJob checks a submission.
func newJob(in model.SubmitJobInput) (store.NewJob, error) {
	c := in.Claim
	switch {
	case strings.TrimSpace(in.Image) == "" || len(in.Image) > 512:
		return store.NewJob{}, badInputf("image: 1 to 512 characters")
	case c.Cores <= 0 || c.Cores > 4096 || math.IsNaN(c.Cores):
		return store.NewJob{}, badInputf("claim.cores: more than 0, at most 4096")
	case c.MemoryMiB < 0:
		return store.NewJob{}, badInputf("claim.memoryMiB: not negative")
	case c.Gpus < 0 || c.Gpus > 64:
		return store.NewJob{}, badInputf("claim.gpus: 0 to 64")
	case c.WallClockSeconds < 1 || c.WallClockSeconds > 365*24*3600:
		return store.NewJob{}, badInputf("claim.wallClockSeconds: 1 to 31536000")
	case in.Priority < -1000 || in.Priority > 1000:
		return store.NewJob{}, badInputf("priority: -1000 to 1000")
	case in.MaxAttempts < 1 || in.MaxAttempts > 100:
		return store.NewJob{}, badInputf("maxAttempts: 1 to 100")
	case !runnerapi.ValidKind(in.Kind):
		return store.NewJob{}, badInputf("kind: lower-case letters, digits, dots, dashes and underscores")
	case len(in.Command) > 256 || len(in.Env) > 256:
		return store.NewJob{}, badInputf("command and env: at most 256 entries each")
	}
	if in.IdempotencyKey != nil && (*in.IdempotencyKey == "" || len(*in.IdempotencyKey) > 200) {
		return store.NewJob{}, badInputf("idempotencyKey: 1 to 200 characters")
	}
	// The spec travels whole in every lease answer, so it is bounded: an
	// agent reads at most runnerapi.LeaseAnswerBytes. (The claim measures
	// specs as text, at least these bytes: see ClaimJobs.)
	size := len(in.Image)
	for _, a := range in.Command {
		size += len(a)
	}
	for _, e := range in.Env {
		size += len(e.Name) + len(e.Value)
	}
	if size > runnerapi.MaxJobSpecBytes {
		return store.NewJob{}, badInputf("image, command and env: at most %d KiB together", runnerapi.MaxJobSpecBytes>>10)
	}
	env := map[string]string{}
	for _, e := range in.Env {
		if !envName.MatchString(e.Name) {
			return store.NewJob{}, badInputf("env: %q is not a variable name", e.Name)
		}
		if _, dup := env[e.Name]; dup {
			return store.NewJob{}, badInputf("env: %s given twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	return store.NewJob{
		PoolID: in.PoolID, Image: in.Image, Command: in.Command, Env: env,
		Claim:    store.Claim{Cores: c.Cores, MemoryMiB: int64(c.MemoryMiB), GPUs: c.Gpus, WallClockSeconds: c.WallClockSeconds},
		Priority: in.Priority, MaxAttempts: in.MaxAttempts, IdempotencyKey: in.IdempotencyKey, Kind: in.Kind,
	}, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
