package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// ParsePodmanInfo reads the facts rendering needs from `podman info
// --format json`.
func ParsePodmanInfo(b []byte) (PodmanFacts, error) {
	var info struct {
		Host struct {
			CgroupVersion     string   `json:"cgroupVersion"`
			CgroupControllers []string `json:"cgroupControllers"`
			Security          struct {
				Rootless bool `json:"rootless"`
			} `json:"security"`
			Pasta struct {
				Executable string `json:"executable"`
			} `json:"pasta"`
			Slirp4netns struct {
				Executable string `json:"executable"`
			} `json:"slirp4netns"`
			EventLogger string `json:"eventLogger"`
		} `json:"host"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return PodmanFacts{}, fmt.Errorf("podman info: %w", err)
	}
	if info.Host.CgroupVersion == "" {
		return PodmanFacts{}, fmt.Errorf("podman info names no cgroup version")
	}
	f := PodmanFacts{CgroupVersion: info.Host.CgroupVersion, Controllers: info.Host.CgroupControllers, Rootless: info.Host.Security.Rootless,
		EventLogger: info.Host.EventLogger}
	switch {
	case info.Host.Pasta.Executable != "":
		f.Network = "pasta"
	case info.Host.Slirp4netns.Executable != "":
		f.Network = "slirp4netns"
	}
	return f, nil
}

// ProbePodman asks the podman at path, as the agent's own user, what its
// containers get. The agent does this once at start-up.
func ProbePodman(ctx context.Context, path string) (PodmanFacts, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "info", "--format", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := runnerapi.Clip(strings.TrimSpace(stderr.String()), 200); msg != "" {
			return PodmanFacts{}, fmt.Errorf("%s info: %w: %s", path, err, msg)
		}
		return PodmanFacts{}, fmt.Errorf("%s info: %w", path, err)
	}
	return ParsePodmanInfo(stdout.Bytes())
}
