package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/errorhandling"

	"github.com/runmesh/runmesh/runnerapi"
)

// Why a pull failed, as ImageError.Class says it.
const (
	// ImageUnknown: the reference names no image (a registry answered that
	// it has no such repository or tag, or the reference is malformed or a
	// short name that resolves to nothing). The job's fault.
	ImageUnknown = "unknown image"
	// RegistryUnreachable: no registry answered (refused, no such host,
	// timed out).
	RegistryUnreachable = "registry unreachable"
	// LoginRefused: the registry wants credentials this host lacks, or
	// refused those it has.
	LoginRefused = "login refused"
	// DiskFull: the image store has no room for the image.
	DiskFull = "disk full"
	// PullFailed: anything else.
	PullFailed = "pull failed"
)

// ImageError says why a job's image could not be had, and whose fault
// that is.
type ImageError struct {
	Image string
	// Class is one of ImageUnknown, RegistryUnreachable, LoginRefused,
	// DiskFull, PullFailed.
	Class string
	// JobFault: the reference can name no image (Class ImageUnknown) and
	// it is not an image named localhost/ that this host was meant to
	// have. Any other failure is the host's: the job may run elsewhere.
	JobFault bool
	Detail   string
}

func (e *ImageError) Error() string {
	if e.JobFault {
		return fmt.Sprintf("image %s does not exist: %s", e.Image, e.Detail)
	}
	return fmt.Sprintf("image %s could not be pulled on this host (%s): %s", e.Image, e.Class, e.Detail)
}

// pullTimeout bounds one pull: the lease is heartbeated meanwhile.
const pullTimeout = 10 * time.Minute

// EnsureImage makes the image local, pulling it when it is not, and
// returns its digest, which the result reports. The pull's progress goes
// to progress, a line at a time.
func (r *Local) EnsureImage(ctx context.Context, image string, progress io.Writer) (string, error) {
	digest, err := r.imageDigest(ctx, image)
	if err == nil {
		return digest, nil
	}
	// Not local (or a name the service cannot look up): the pull says why.
	if api := (*APIError)(nil); errors.As(err, &api) {
		return "", ClassifyPull(image, err)
	}
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	if err := r.pull(ctx, image, progress); err != nil {
		if ctx.Err() != nil {
			return "", &ImageError{Image: image, Class: PullFailed, Detail: "the pull timed out"}
		}
		return "", ClassifyPull(image, err)
	}
	return r.imageDigest(ctx, image)
}

func (r *Local) pull(ctx context.Context, image string, progress io.Writer) error {
	c, err := r.api.with(ctx)
	if err != nil {
		return err
	}
	if progress == nil {
		progress = io.Discard
	}
	// The policy is "missing": two pulls of one image at once (a pool
	// image and a job's) fetch it once.
	_, err = images.Pull(c, image, new(images.PullOptions).WithProgressWriter(progress).WithPolicy("missing"))
	return err
}

func (r *Local) imageDigest(ctx context.Context, image string) (string, error) {
	c, err := r.api.with(ctx)
	if err != nil {
		return "", err
	}
	img, err := images.GetImage(c, image, nil)
	if err != nil {
		return "", err
	}
	return string(img.Digest), nil
}

// isNotFound: the service answered 404 (no such image or container).
func isNotFound(err error) bool {
	var m *errorhandling.ErrorModel
	return errors.As(err, &m) && m.ResponseCode == http.StatusNotFound
}

// ClassifyPull decides whose fault a failed pull is. podman's service
// answers a reference it cannot parse with a 400 before the pull starts;
// a failure during the pull comes in its progress stream, as the text of
// the error containers/image returned (podman 4.3 and 5.x alike), which
// carries the registry's error code (MANIFEST_UNKNOWN, NAME_UNKNOWN,
// UNAUTHORIZED, DENIED) or the system's (ECONNREFUSED, ENOSPC) in words.
func ClassifyPull(image string, err error) *ImageError {
	e := &ImageError{Image: image, Class: PullFailed}
	var api *APIError
	var m *errorhandling.ErrorModel
	switch {
	case errors.As(err, &api):
		e.Detail = err.Error() // the host's podman, not the registry
	case errors.As(err, &m) && m.ResponseCode == http.StatusBadRequest:
		e.Class, e.Detail = ImageUnknown, m.Error()
	case errors.As(err, &m):
		e.Detail = m.Error()
	default:
		e.Detail = err.Error()
		e.Class = pullClass(e.Detail)
	}
	e.Detail = runnerapi.Clip(strings.ToValidUTF8(e.Detail, ""), 300)
	// localhost/ is this host's own image, which it should have had.
	e.JobFault = e.Class == ImageUnknown && !strings.HasPrefix(image, "localhost/")
	return e
}

// pullClasses are the words of each class, in the order they are tried:
// a failure to reach the registry names the registry before anything
// else.
var pullClasses = []struct {
	class string
	words []string
}{
	{DiskFull, []string{"no space left on device", "disk quota exceeded"}},
	{RegistryUnreachable, []string{"connection refused", "no such host", "i/o timeout", "network is unreachable",
		"connection reset by peer", "TLS handshake timeout", "server gave HTTP response to HTTPS client"}},
	{LoginRefused, []string{"unauthorized", "authentication required", "denied", "invalid username/password"}},
	{ImageUnknown, []string{"manifest unknown", "name unknown", "not found", "did not resolve to an alias",
		"invalid reference format", "repository name must be lowercase"}},
}

// pullClass reads the class from a pull's error text.
func pullClass(text string) string {
	for _, c := range pullClasses {
		for _, w := range c.words {
			if strings.Contains(text, w) {
				return c.class
			}
		}
	}
	return PullFailed
}

// Container is a job container podman has, with or without its unit.
type Container struct {
	Name    string
	LeaseID string
	Attempt int
	State   string
}

// Containers lists the containers labelled with a lease, running or not.
func (r *Local) Containers(ctx context.Context) ([]Container, error) {
	c, err := r.api.with(ctx)
	if err != nil {
		return nil, err
	}
	list, err := containers.List(c, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"label": {LabelLease}}))
	if err != nil {
		return nil, fmt.Errorf("podman's container list: %w", err)
	}
	var cs []Container
	for _, p := range list {
		c := Container{State: p.State, LeaseID: p.Labels[LabelLease]}
		if len(p.Names) > 0 {
			c.Name = p.Names[0]
		}
		c.Attempt, _ = strconv.Atoi(p.Labels[LabelAttempt])
		cs = append(cs, c)
	}
	return cs, nil
}

// RemoveContainer stops and removes a container that has no unit the
// agent follows; one already gone is not an error.
func (r *Local) RemoveContainer(ctx context.Context, name string) error {
	c, err := r.api.with(ctx)
	if err != nil {
		return err
	}
	reports, err := containers.Remove(c, name, new(containers.RemoveOptions).WithForce(true).WithIgnore(true).WithTimeout(10))
	if err == nil {
		for _, rep := range reports {
			err = errors.Join(err, rep.Err)
		}
	}
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("remove container %s: %w", name, err)
	}
	return nil
}
