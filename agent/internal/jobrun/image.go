package jobrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/runmesh/runmesh/agent/internal/jobunit"
	"github.com/runmesh/runmesh/runnerapi"
)

// ImageError says why a job's image could not be had, and whose fault
// that is.
type ImageError struct {
	Image string
	// JobFault: the reference can name no image (a registry answered that
	// it does not exist, or the name is malformed or ambiguous). Any other
	// failure, an unreachable registry, a full disk, an image named
	// localhost/ that this host was meant to have, is the host's: the job
	// may run elsewhere.
	JobFault bool
	Detail   string
}

func (e *ImageError) Error() string {
	if e.JobFault {
		return fmt.Sprintf("image %s does not exist: %s", e.Image, e.Detail)
	}
	return fmt.Sprintf("image %s could not be pulled on this host: %s", e.Image, e.Detail)
}

// pullTimeout bounds one pull: the lease is heartbeated meanwhile.
const pullTimeout = 10 * time.Minute

// EnsureImage makes the image local, pulling it when it is not, and
// returns its digest, which the result reports.
func (r *Runtime) EnsureImage(ctx context.Context, image string) (string, error) {
	if digest, err := r.imageDigest(ctx, image); err == nil {
		return digest, nil
	}
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.host.Podman, "pull", "--quiet", "--", image)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", &ImageError{Image: image, Detail: "the pull timed out"}
		}
		return "", ClassifyPullError(image, stderr.String())
	}
	return r.imageDigest(ctx, image)
}

func (r *Runtime) imageDigest(ctx context.Context, image string) (string, error) {
	out, err := exec.CommandContext(ctx, r.host.Podman, "image", "inspect", "--format", "{{.Digest}}", "--", image).Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// jobFaults are what podman says when a reference can name no image.
var jobFaults = []string{
	"manifest unknown", "name unknown", "not found", // the registry answered 404
	"did not resolve to an alias", // a short name that means nothing here
	"invalid reference format", "repository name must be lowercase",
}

// ClassifyPullError reads podman pull's last error line.
func ClassifyPullError(image, stderr string) *ImageError {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "Error: ")
	e := &ImageError{Image: image, Detail: runnerapi.Clip(strings.ToValidUTF8(last, ""), 300)}
	if strings.HasPrefix(image, "localhost/") {
		return e // this host's own image, which it should have had
	}
	for _, f := range jobFaults {
		if strings.Contains(last, f) {
			e.JobFault = true
		}
	}
	return e
}

// Container is a job container podman has, with or without its unit.
type Container struct {
	Name    string
	LeaseID string
	Attempt int
	State   string
}

// Containers lists the containers labelled with a lease, running or not.
func (r *Runtime) Containers(ctx context.Context) ([]Container, error) {
	out, err := exec.CommandContext(ctx, r.host.Podman, "ps", "--all", "--filter", "label="+jobunit.LabelLease, "--format", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("podman ps: %w", err)
	}
	var ps []struct {
		Names  []string
		State  string
		Labels map[string]string
	}
	if err := json.Unmarshal(out, &ps); err != nil {
		return nil, fmt.Errorf("podman ps: %w", err)
	}
	var cs []Container
	for _, p := range ps {
		c := Container{State: p.State, LeaseID: p.Labels[jobunit.LabelLease]}
		if len(p.Names) > 0 {
			c.Name = p.Names[0]
		}
		c.Attempt, _ = strconv.Atoi(p.Labels[jobunit.LabelAttempt])
		cs = append(cs, c)
	}
	return cs, nil
}

// RemoveContainer stops and removes a container that has no unit the
// agent follows.
func (r *Runtime) RemoveContainer(ctx context.Context, name string) error {
	out, err := exec.CommandContext(ctx, r.host.Podman, "rm", "--force", "--ignore", "--time", "10", "--", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman rm %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}
