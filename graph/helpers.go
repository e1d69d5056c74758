package graph

import (
	"context"
	"errors"
	"math"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vikstrous/dataloadgen"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/graph/model"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// loadOrganisation resolves an optional organisation reference through the
// request's loader (nil stays nil: a platform object).
func loadOrganisation(ctx context.Context, id *uuid.UUID) (*record.Organisation, error) {
	if id == nil {
		return nil, nil
	}
	o, err := loadersFor(ctx).organisation.Load(ctx, *id)
	if errors.Is(err, dataloadgen.ErrNotFound) {
		return nil, record.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// loadPool resolves a pool reference through the request's loader.
func loadPool(ctx context.Context, id uuid.UUID) (*record.Pool, error) {
	p, err := loadersFor(ctx).pool.Load(ctx, id)
	if errors.Is(err, dataloadgen.ErrNotFound) {
		return nil, record.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// nullIfNotFound turns "not found" into a null answer, so that something
// outside the caller's scope and something that does not exist look alike.
func nullIfNotFound[T any](v *T, err error) (*T, error) {
	if errors.Is(err, record.ErrNotFound) {
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
func targetOrganisation(me record.Admin, named *uuid.UUID) (*uuid.UUID, error) {
	if me.Role == record.RolePlatformAdmin {
		return named, nil
	}
	if me.OrganisationID == nil {
		return nil, errForbidden
	}
	if named != nil && *named != *me.OrganisationID {
		return nil, record.ErrNotFound
	}
	return me.OrganisationID, nil
}

// settingChange is what an update's input does to a pool setting: left
// out, it stays; given as null, it returns to the default.
func settingChange(in graphql.Omittable[*int]) tenancy.SettingChange {
	v, set := in.ValueOK()
	switch {
	case !set:
		return tenancy.SettingChange{}
	case v == nil:
		return tenancy.ToDefault()
	}
	return tenancy.SetTo(*v)
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
func runnerHealth(in []runnerapi.Condition) []model.HealthCondition {
	out := make([]model.HealthCondition, 0, len(in))
	for _, c := range in {
		out = append(out, model.HealthCondition{Name: c.Name, Ok: c.OK, Severity: c.Severity, Title: c.Title})
	}
	return out
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

// gpus are the GPUs as reported, with the faults the server holds against
// them: such a GPU is unhealthy whatever its agent says.
func gpus(in []runnerapi.GPU, held []runnerapi.GPUFault) []model.GPU {
	faults := runnerapi.Faulted(held)
	out := make([]model.GPU, 0, len(in))
	for _, g := range in {
		m := model.GPU{
			Index: g.Index, UUID: g.UUID, Name: g.Name,
			MemoryTotalMiB: int(g.MemoryTotalMiB), MemoryUsedMiB: int(g.MemoryUsedMiB), MemoryFreeMiB: int(g.MemoryFreeMiB),
			UtilisationPercent: g.Utilisation, TemperatureC: g.TemperatureC, PowerWatts: g.PowerWatts, Healthy: g.Healthy,
		}
		f, held := faults[g.UUID]
		switch {
		case held:
			m.Healthy, m.Fault = false, gpuFault(f)
			evidence := f.Evidence()
			m.Health = &evidence
		case g.Fault != nil:
			m.Fault = gpuFault(*g.Fault)
		}
		if g.Health != "" && m.Health == nil {
			m.Health = &g.Health
		}
		out = append(out, m)
	}
	return out
}

func gpuFault(f runnerapi.GPUFault) *model.GPUFault {
	m := &model.GPUFault{
		EccUncorrected: clampInt(f.ECCUncorrected), EccCorrected: clampInt(f.ECCCorrected),
		ObservedAt: f.ObservedAt, RecordedAt: f.RecordedAt, Evidence: f.Evidence(),
	}
	if f.XID != 0 {
		m.Xid = &f.XID
	}
	return m
}

// clampInt fits a count into GraphQL's 32-bit Int.
func clampInt(n uint64) int { return int(min(n, math.MaxInt32)) }

// submission is what the queue is asked to queue: the input as given. The
// queue checks it.
func submission(in model.SubmitJobInput, by uuid.UUID) queue.Submission {
	c := in.Claim
	env := make([]queue.EnvVar, len(in.Env))
	for i, e := range in.Env {
		env[i] = queue.EnvVar{Name: e.Name, Value: e.Value}
	}
	return queue.Submission{
		PoolID: in.PoolID, SubmittedBy: &by, Image: in.Image, Command: in.Command, Env: env,
		Claim: record.Claim{Cores: c.Cores, MemoryMiB: int64(c.MemoryMiB), GPUs: c.Gpus, WallClockSeconds: c.WallClockSeconds},
		Options: record.JobOptions{Network: in.Network, WorkingDir: deref(in.WorkingDir), ScratchMiB: int64(c.ScratchMiB), DataMiB: int64(c.DataMiB),
			Inputs: jobInputs(in.Inputs), Outputs: jobOutputs(in.Outputs), Stdio: stdioMode(in.Stdio)},
		Priority: in.Priority, MaxAttempts: in.MaxAttempts, IdempotencyKey: in.IdempotencyKey, Kind: in.Kind,
		Selector: deref(in.Selector), IdleTimeoutSeconds: in.IdleTimeoutSeconds,
	}
}

// stdioMode is a job's mode as the queue keeps it (LOGS: the zero value);
// a value the schema does not have is passed on for the queue to refuse.
func stdioMode(s model.Stdio) runnerapi.Stdio {
	if s == model.StdioLogs {
		return runnerapi.StdioLogs
	}
	return runnerapi.Stdio(s)
}

// stdioOf is a job's mode as the schema names it.
func stdioOf(s runnerapi.Stdio) model.Stdio {
	if s == runnerapi.StdioLogs {
		return model.StdioLogs
	}
	return model.Stdio(s)
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// loadAdmin resolves an optional admin reference through the request's
// loader: nil for none, and for an admin outside the caller's scope.
func loadAdmin(ctx context.Context, id *uuid.UUID) (*record.Admin, error) {
	if id == nil {
		return nil, nil
	}
	a, err := loadersFor(ctx).admin.Load(ctx, *id)
	if errors.Is(err, dataloadgen.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// maxLabelFilter is a label's longest key=value (runnerapi's bounds).
const maxLabelFilter = 128 + 1 + 256

// labelFilter reads a runners list's label filter: key=value, or a key
// alone for any value.
func labelFilter(s string) (key, value *string, err error) {
	k, v, hasValue := strings.Cut(s, "=")
	if k == "" || len(s) > maxLabelFilter {
		return nil, nil, badInputf("label: key=value, or a key")
	}
	if hasValue {
		return &k, &v, nil
	}
	return &k, nil, nil
}

// loadJob resolves a job reference through the request's loader.
func loadJob(ctx context.Context, id uuid.UUID) (*record.Job, error) {
	j, err := loadersFor(ctx).job.Load(ctx, id)
	if errors.Is(err, dataloadgen.ErrNotFound) {
		return nil, record.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &j, nil
}

func jobInputs(in []model.JobInputInput) []runnerapi.JobInput {
	var out []runnerapi.JobInput
	for _, i := range in {
		out = append(out, runnerapi.JobInput{Name: i.Name, Key: deref(i.Key), URL: deref(i.URL)})
	}
	return out
}

func jobOutputs(in []model.JobOutputInput) []runnerapi.JobOutput {
	var out []runnerapi.JobOutput
	for _, o := range in {
		out = append(out, runnerapi.JobOutput{Path: o.Path, Key: o.Key})
	}
	return out
}
