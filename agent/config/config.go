// Package config reads the agent's configuration file. Like the server's,
// it is strict: a version, no unknown fields, and "missing" told apart from
// "invalid". Without a file the agent runs on defaults.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/runmesh/runmesh/agent/capacity"
	"github.com/runmesh/runmesh/runnerapi"
)

// Version is the only config version this agent reads.
const Version = 1

// Config is the agent's configuration.
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
	// Kinds are the job kinds this runner takes (default: default).
	Kinds []string `yaml:"kinds"`
}

// Metrics is the agent's Prometheus endpoint.
type Metrics struct {
	// Listen is where /metrics is served; "off" disables it. Loopback by
	// default: GPU metrics name jobs and organisations.
	Listen string `yaml:"listen"`
}

// Defaults is the configuration without a file.
func Defaults(stateDir string) Config {
	return Config{Version: Version, WorkDir: stateDir + "/work", Metrics: Metrics{Listen: "127.0.0.1:9400"}, Kinds: []string{"default"}}
}

// Load reads path, or returns Defaults when path is "".
func Load(path, stateDir string) (Config, error) {
	if path == "" {
		return Defaults(stateDir), nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, fmt.Errorf("config %s: file not found", path)
	}
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	c := Defaults(stateDir)
	c.Version = 0
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config %s: missing required setting version", path)
		}
		return Config{}, fmt.Errorf("config %s: invalid: %s", path, strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n ", ""), "yaml: unmarshal errors:"))
	}
	switch {
	case c.Version == 0:
		return Config{}, fmt.Errorf("config %s: missing required setting version", path)
	case c.Version != Version:
		return Config{}, fmt.Errorf("config %s: invalid setting version: this agent reads version %d, the file says %d", path, Version, c.Version)
	}
	if err := capacity.CheckDeclared(c.Labels); err != nil {
		return Config{}, fmt.Errorf("config %s: invalid setting labels: %w", path, err)
	}
	if c.Podman != "" && !filepath.IsAbs(c.Podman) {
		return Config{}, fmt.Errorf("config %s: invalid setting podman: %q is not an absolute path", path, c.Podman)
	}
	if len(c.Kinds) == 0 || len(c.Kinds) > runnerapi.MaxKinds {
		return Config{}, fmt.Errorf("config %s: invalid setting kinds: 1 to %d job kinds", path, runnerapi.MaxKinds)
	}
	for _, k := range c.Kinds {
		if !runnerapi.ValidKind(k) {
			return Config{}, fmt.Errorf("config %s: invalid setting kinds: %q is not a lower-case name", path, k)
		}
	}
	if c.Metrics.Listen != "off" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			return Config{}, fmt.Errorf("config %s: invalid setting metrics.listen: %w", path, err)
		}
	}
	return c, nil
}
