package runtime

import (
	"fmt"
	"slices"
	"strings"
)

// Enforcement says which limits a job's container is held to on this host.
// Each is true only when the host's facts prove it; Reason says what is
// missing whenever one is false.
type Enforcement struct {
	Memory bool
	CPU    bool
	Pids   bool
	Reason string
}

// PodmanFacts are what `podman info` says about the cgroups the runmesh
// user's containers get.
type PodmanFacts struct {
	// CgroupVersion is "v1" or "v2" (podman info's host.cgroupVersion).
	CgroupVersion string
	// Controllers are the controllers delegated to the user
	// (host.cgroupControllers); rootless Podman on v2 can use only these.
	Controllers []string
	Rootless    bool
	// Network is the rootless network podman has for a job that may have
	// one: "pasta" (podman 5's default) or "slirp4netns" (podman 4's);
	// "" when it has neither.
	Network string
	// EventLogger is where podman's events go: "file", "journald" (which a
	// system user may not read back) or "none".
	EventLogger string
}

// Cgroup is the cgroup version as a number, or 0 when podman named none
// this package knows.
func (f PodmanFacts) Cgroup() int {
	switch f.CgroupVersion {
	case "v1":
		return 1
	case "v2":
		return 2
	}
	return 0
}

// DetectEnforcement decides from Podman's facts which limits hold. Rootless
// Podman on cgroup v1 ignores --memory, --cpus and --pids-limit with only a
// warning, and on v2 it can set only the controllers delegated to the
// user, so nothing is claimed beyond those.
func DetectEnforcement(f PodmanFacts) Enforcement {
	switch f.Cgroup() {
	case 1:
		if f.Rootless {
			return Enforcement{Reason: "cgroup v1: rootless Podman ignores resource limits"}
		}
		// A rootful v1 host has every controller mounted.
		return Enforcement{Memory: true, CPU: true, Pids: true}
	case 2:
		e := Enforcement{
			Memory: slices.Contains(f.Controllers, "memory"),
			CPU:    slices.Contains(f.Controllers, "cpu"),
			Pids:   slices.Contains(f.Controllers, "pids"),
		}
		var missing []string
		for _, c := range []struct {
			name string
			ok   bool
		}{{"memory", e.Memory}, {"cpu", e.CPU}, {"pids", e.Pids}} {
			if !c.ok {
				missing = append(missing, c.name)
			}
		}
		if len(missing) > 0 {
			e.Reason = fmt.Sprintf("cgroup v2 without the %s controller delegated to this user (Delegate= in user@.service)", strings.Join(missing, ", "))
		}
		return e
	}
	return Enforcement{Reason: fmt.Sprintf("podman reports cgroup version %q", f.CgroupVersion)}
}
