package agent

import (
	"context"
	"crypto/ed25519"
	"io"
	"time"

	"github.com/runmesh/runmesh/agent/internal/enrol"
	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

// Enrolment is what joining a pool needs besides the configuration.
type Enrolment struct {
	Server        string // https://host:port of the runner listener
	CAFingerprint string // hex SHA-256 of the control plane's root, to pin
	Name          string // the runner's name
	// Token returns the single-use enrolment token. It is called only when
	// the runner has not enrolled yet, so a resumed enrolment needs none.
	Token func() (string, error)
	// Out shows the operator the progress: the runner id and the key
	// fingerprint to compare, then the administrator's decision.
	Out io.Writer
}

// Enrol joins the runner to a pool, or resumes an interrupted enrolment,
// and returns once it holds a certificate or an administrator said no. The
// administrator sees the capacity it measures.
func Enrol(ctx context.Context, cfg Config, e Enrolment) error {
	collector := newCollector(cfg, probePodman(ctx, cfg).limits())
	defer collector.GPUs.Close()
	_, err := enrol.Run(ctx, enrol.Options{
		Server: e.Server, CAFingerprint: e.CAFingerprint, Name: e.Name, Dir: cfg.dir(),
		Out: e.Out, Log: cfg.log(), Capacity: collector.Measure, Token: e.Token,
	})
	return err
}

// Fingerprint is the runner key's fingerprint, the string an administrator
// compares before approving it.
func Fingerprint(stateDir string) (string, error) {
	key, err := identity.Dir(stateDir).LoadKey()
	if err != nil {
		return "", err
	}
	return pki.KeyFingerprint(key.Public().(ed25519.PublicKey)), nil
}

// Capacity is what the runner measures: GPUs through NVML, cores, memory
// and disk, and the limits its job containers would be held to.
func Capacity(ctx context.Context, cfg Config) (runnerapi.Capacity, error) {
	collector := newCollector(cfg, probePodman(ctx, cfg).limits())
	defer collector.GPUs.Close()
	return collector.Measure()
}

// StatusReport is the runner's enrolment, its certificate and the control
// plane's view of it.
type StatusReport struct {
	StateDir       string             `json:"state_dir"`
	Enrolment      string             `json:"enrolment"` // none, pending, enrolled
	Server         string             `json:"server,omitempty"`
	RunnerID       string             `json:"runner_id,omitempty"`
	Name           string             `json:"name,omitempty"`
	KeyFingerprint string             `json:"key_fingerprint,omitempty"`
	Certificate    *CertificateStatus `json:"certificate,omitempty"`
	ServerView     *ServerView        `json:"server_view,omitempty"`
}

// CertificateStatus is the runner's certificate as it holds it.
type CertificateStatus struct {
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
	Expired  bool      `json:"expired"`
}

// ServerView is what the control plane answers to whoami, or why it did not.
type ServerView struct {
	WhoAmI *runnerapi.WhoAmIResponse `json:"whoami,omitempty"`
	Error  string                    `json:"error,omitempty"`
}

// Status reads the state directory and, once the runner is enrolled, asks
// the control plane who it is. What cannot be read is left out: a runner
// that has not enrolled yet has a status too.
func Status(ctx context.Context, stateDir string) StatusReport {
	dir := identity.Dir(stateDir)
	rep := StatusReport{StateDir: stateDir, Enrolment: "none"}
	if key, err := dir.LoadKey(); err == nil {
		rep.KeyFingerprint = pki.KeyFingerprint(key.Public().(ed25519.PublicKey))
	}
	if st, err := dir.LoadState(); err == nil {
		rep.Enrolment, rep.Server, rep.RunnerID, rep.Name = "pending", st.Server, st.RunnerID, st.Name
	}
	if chain, _, err := dir.LoadChain(); err == nil {
		rep.Enrolment = "enrolled"
		leaf := chain[0]
		rep.Certificate = &CertificateStatus{leaf.SerialNumber.String(), leaf.NotAfter.UTC(), time.Now().After(leaf.NotAfter)}
		rep.ServerView = &ServerView{}
		if who, err := whoami(ctx, dir); err != nil {
			rep.ServerView.Error = err.Error()
		} else {
			rep.ServerView.WhoAmI = who
		}
	}
	return rep
}

func whoami(ctx context.Context, dir identity.Dir) (*runnerapi.WhoAmIResponse, error) {
	id, err := identity.Load(dir)
	if err != nil {
		return nil, err
	}
	c, err := runnerclient.New(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	who, err := c.WhoAmI(ctx)
	if err != nil {
		return nil, err
	}
	return &who, nil
}
