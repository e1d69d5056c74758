package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Local is this host's System: the runmesh user's systemd manager, over
// D-Bus, which runs each job as a transient unit, and the user's podman
// service, which the agent asks the rest. A unit outlives the agent that
// started it: a restarted agent finds its jobs again with Survivors and
// keeps following them by name.
type Local struct {
	conn *sddbus.Conn
	host Host
	api  *podmanAPI
}

// Connect reaches the user manager of the user the agent runs as
// (XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS must name it) and the
// user's podman service at socket.
func Connect(ctx context.Context, host Host, socket string) (*Local, error) {
	api := newPodmanAPI(socket)
	if _, err := api.with(ctx); err != nil {
		return nil, err
	}
	conn, err := sddbus.NewUserConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("the user's systemd manager: %w", err)
	}
	for _, dir := range []string{host.EnvDir, host.LogDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return &Local{conn: conn, host: host, api: api}, nil
}

// Host is what the runtime renders units for.
func (r *Local) Host() Host { return r.host }

// Close drops the D-Bus connection; the units go on.
func (r *Local) Close() { r.conn.Close() }

// Start renders job and starts its unit. It returns once systemd has
// started it: the container is created and conmon said READY. The unit
// says where its output goes (LogPath).
func (r *Local) Start(ctx context.Context, job Spec) (Unit, error) {
	host := r.host
	if len(job.GPUs) > 0 {
		// Read at each start: the specs are written when the driver
		// loads, which may be after the agent started.
		var skipped error
		host.CDIDevices, skipped = CDIDevices(CDISpecDirs)
		if skipped != nil && !hasAll(host.CDIDevices, job.GPUs) {
			return Unit{}, fmt.Errorf("%w: %v", ErrUnrunnable, skipped)
		}
	}
	u, err := Render(host, job)
	if err != nil {
		return u, err
	}
	props, err := u.DBus()
	if err != nil {
		return u, err
	}
	// 0600 in a 0700 directory: the values may be secrets.
	if err := os.WriteFile(u.EnvPath, u.EnvFile, 0o600); err != nil {
		return u, err
	}
	done := make(chan string, 1)
	// systemd refuses a transient unit whose name is taken: a unit of this
	// lease and attempt already there is a survivor to adopt, and its env
	// file is its own.
	if _, err := r.conn.StartTransientUnitContext(ctx, u.Name, "fail", props, done); err != nil {
		if !isDBusError(err, "org.freedesktop.systemd1.UnitExists") {
			os.Remove(u.EnvPath)
		}
		return u, fmt.Errorf("start %s: %w", u.Name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return u, fmt.Errorf("start %s: %s", u.Name, res)
		}
	case <-ctx.Done():
		return u, ctx.Err()
	}
	return u, nil
}

// Status is what systemd knows of a job unit.
type Status struct {
	// Ended is true once the unit is inactive or failed.
	Ended bool
	// ExitCode is the container's exit code (the unit's ExecMainStatus)
	// when it exited; nil when it was killed or never ran.
	ExitCode *int
	// Result is systemd's: success, exit-code, signal, timeout (start or
	// wall clock), oom-kill...
	Result string
	// WallClock is true when RuntimeMaxSec stopped it.
	WallClock bool
	// StartFailed: the container never ran. podman exited before conmon
	// said READY (an image that is not there, a runtime that refuses), or
	// the start timed out. ExitCode is nil then: podman's own code is not
	// the job's.
	StartFailed bool
	// StartStatus is podman's own exit status when the start failed: 125
	// for podman's errors, 126 and 127 when the job's command could not be
	// run (see podman-run(1)).
	StartStatus int
	// MemoryBytes is the unit's memory use now (its cgroup's, containers
	// included); 0 when systemd does not account it.
	MemoryBytes uint64
	// OOM: the kernel's OOM killer ended a process of the unit.
	OOM bool
}

// Status reads a unit's state. The worker asks every second of every job,
// so a running unit costs two small calls (its states, its memory); only an
// ended one has all its properties read, for how it ended.
func (r *Local) Status(ctx context.Context, unit string) (Status, error) {
	units, err := r.conn.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil {
		return Status{}, err
	}
	if len(units) != 1 || units[0].LoadState == "not-found" {
		return Status{}, ErrNoUnit
	}
	state, sub := units[0].ActiveState, units[0].SubState
	// RemainAfterExit keeps an ended job's unit active in SubState exited.
	s := Status{Ended: state == "inactive" || state == "failed" || sub == "exited"}
	if !s.Ended {
		m, err := r.conn.GetServicePropertyContext(ctx, unit, "MemoryCurrent")
		if err != nil {
			return Status{}, err
		}
		if v, ok := m.Value.Value().(uint64); ok && v != math.MaxUint64 {
			s.MemoryBytes = v
		}
		return s, nil
	}
	p, err := r.conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return Status{}, err
	}
	u, err := r.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return Status{}, err
	}
	s.Result, _ = p["Result"].(string)
	s.OOM = s.Result == "oom-kill"
	if m, ok := p["MemoryCurrent"].(uint64); ok && m != math.MaxUint64 {
		s.MemoryBytes = m
	}
	entered, _ := u["ActiveEnterTimestamp"].(uint64)
	s.StartFailed = entered == 0
	// CLD_EXITED is 1: the main process (conmon) exited with the
	// container's code.
	if code, _ := p["ExecMainCode"].(int32); code == 1 {
		st := int(p["ExecMainStatus"].(int32))
		if s.StartFailed {
			s.StartStatus = st
		} else {
			s.ExitCode = &st
		}
	}
	// RuntimeMaxSec ends a running unit with Result=timeout; a start that
	// timed out never became active. A job that had already exited when an
	// unforgotten unit ran out of time was not stopped by the clock.
	if s.Result == "timeout" {
		exited, _ := p["ExecMainExitTimestamp"].(uint64)
		limit, _ := p["RuntimeMaxUSec"].(uint64)
		s.WallClock = entered != 0 && (exited == 0 || exited >= entered+limit)
	}
	return s, nil
}

// ErrNoUnit: systemd has no such unit (any more).
var ErrNoUnit = errors.New("no such job unit")

// Stop stops a unit (cancellation, or a survivor the server does not
// want): podman stop gives the payload 10 s, then the unit is gone.
func (r *Local) Stop(ctx context.Context, unit string) error {
	done := make(chan string, 1)
	if _, err := r.conn.StopUnitContext(ctx, unit, "replace", done); err != nil {
		return fmt.Errorf("stop %s: %w", unit, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Forget lets systemd drop a unit that ended, once its result is
// reported: it stops the (active, exited) unit, which runs its cleanup,
// and clears a failed one. A unit already gone is not an error.
func (r *Local) Forget(ctx context.Context, unit string) error {
	if err := r.Stop(ctx, unit); err != nil && !isDBusError(err, "org.freedesktop.systemd1.NoSuchUnit") {
		return err
	}
	err := r.conn.ResetFailedUnitContext(ctx, unit)
	if err != nil && !isDBusError(err, "org.freedesktop.systemd1.NoSuchUnit") {
		return err
	}
	return nil
}

func isDBusError(err error, name string) bool {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name == name
	}
	var p *dbus.Error
	return errors.As(err, &p) && p.Name == name
}

// Survivor is a job unit found by name.
type Survivor struct {
	Unit        string
	LeaseID     string
	Attempt     int
	ActiveState string
}

// Survivors lists the job units the user's manager holds, running or
// ended and not yet forgotten.
func (r *Local) Survivors(ctx context.Context) ([]Survivor, error) {
	units, err := r.conn.ListUnitsByPatternsContext(ctx, nil, []string{UnitPrefix + "*.service"})
	if err != nil {
		return nil, err
	}
	var out []Survivor
	for _, u := range units {
		lease, attempt, ok := ParseUnitName(u.Name)
		if !ok {
			continue
		}
		out = append(out, Survivor{Unit: u.Name, LeaseID: lease, Attempt: attempt, ActiveState: u.ActiveState})
	}
	return out, nil
}

// ParseUnitName reads the lease and attempt back from a job unit's name.
func ParseUnitName(name string) (lease string, attempt int, ok bool) {
	rest, found := strings.CutPrefix(name, UnitPrefix)
	if !found {
		return "", 0, false
	}
	rest, found = strings.CutSuffix(rest, ".service")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", 0, false
	}
	attempt, err := strconv.Atoi(rest[i+1:])
	if err != nil || attempt < 1 {
		return "", 0, false
	}
	return rest[:i], attempt, true
}
