package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"gopkg.in/yaml.v3"

	"github.com/runmesh/runmesh/agent/internal/capacity"
	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/runnerapi"
)

// ConfigVersion is the only config version this agent reads.
const ConfigVersion = 1

// DefaultStateDir holds the key, the certificates and the agent's state
// unless --state-dir says otherwise.
const DefaultStateDir = identity.DefaultStateDir

// Config is what the agent runs with. The file gives the settings above
// StateDir (LoadConfig); the command that runs the agent sets the rest,
// which no file can.
type Config struct {
	Version int `yaml:"version"`
	// WorkDir is where jobs write; its free space is reported.
	WorkDir string `yaml:"work_dir"`
	// Labels are declared facts about the runner (rack, team, ...). Keys
	// under runmesh.io/ are the agent's own and cannot be declared.
	Labels  map[string]string `yaml:"labels"`
	Metrics Metrics           `yaml:"metrics"`
	// Podman is the podman binary jobs run with; empty finds it on PATH.
	Podman string `yaml:"podman"`
	// PodmanSocket is the user's podman service, which everything but the
	// job's own process asks; empty is $XDG_RUNTIME_DIR/podman/podman.sock,
	// where the user's podman.socket listens.
	PodmanSocket string `yaml:"podman_socket"`
	// Kinds are the job kinds this runner takes (default: default).
	Kinds []string `yaml:"kinds"`

	// StateDir holds the key, the certificates and the held leases.
	StateDir string `yaml:"-"`
	// NVML is the library GPUs are measured through; nil loads the real
	// one (no driver: no GPUs, and the agent says why). Tests give a mock.
	NVML nvml.Interface `yaml:"-"`
	// AgentVersion is reported to the control plane with every heartbeat
	// and result.
	AgentVersion string `yaml:"-"`
	// Log receives the agent's logs; nil is slog's default.
	Log *slog.Logger `yaml:"-"`
}

// Metrics is the agent's Prometheus endpoint.
type Metrics struct {
	// Listen is where /metrics is served; "off" disables it. Loopback by
	// default: GPU metrics name jobs and organisations.
	Listen string `yaml:"listen"`
}

// DefaultConfig is the configuration without a file.
func DefaultConfig(stateDir string) Config {
	return Config{Version: ConfigVersion, WorkDir: stateDir + "/work", Metrics: Metrics{Listen: "127.0.0.1:9400"}, Kinds: []string{"default"},
		StateDir: stateDir}
}

// LoadConfig reads path, or returns DefaultConfig when path is "". Like the
// server's, it is strict: a version, no unknown fields, and "missing" told
// apart from "invalid".
func LoadConfig(path, stateDir string) (Config, error) {
	if path == "" {
		return DefaultConfig(stateDir), nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, fmt.Errorf("config %s: file not found", path)
	}
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	c := DefaultConfig(stateDir)
	c.Version = 0
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config %s: missing required setting version", path)
		}
		return Config{}, fmt.Errorf("config %s: invalid: %s", path, strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n ", ""), "yaml: unmarshal errors:"))
	}
	if err := c.check(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

func (c Config) check() error {
	switch {
	case c.Version == 0:
		return errors.New("missing required setting version")
	case c.Version != ConfigVersion:
		return fmt.Errorf("invalid setting version: this agent reads version %d, the file says %d", ConfigVersion, c.Version)
	}
	if err := capacity.CheckDeclared(c.Labels); err != nil {
		return fmt.Errorf("invalid setting labels: %w", err)
	}
	if c.Podman != "" && !filepath.IsAbs(c.Podman) {
		return fmt.Errorf("invalid setting podman: %q is not an absolute path", c.Podman)
	}
	if c.PodmanSocket != "" && !filepath.IsAbs(c.PodmanSocket) {
		return fmt.Errorf("invalid setting podman_socket: %q is not an absolute path", c.PodmanSocket)
	}
	if len(c.Kinds) == 0 || len(c.Kinds) > runnerapi.MaxKinds {
		return fmt.Errorf("invalid setting kinds: 1 to %d job kinds", runnerapi.MaxKinds)
	}
	for _, k := range c.Kinds {
		if !runnerapi.ValidKind(k) {
			return fmt.Errorf("invalid setting kinds: %q is not a lower-case name", k)
		}
	}
	if c.Metrics.Listen != "off" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			return fmt.Errorf("invalid setting metrics.listen: %w", err)
		}
	}
	return nil
}

func (c Config) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

func (c Config) nvml() nvml.Interface {
	if c.NVML == nil {
		return nvml.New()
	}
	return c.NVML
}

func (c Config) dir() identity.Dir { return identity.Dir(c.StateDir) }
