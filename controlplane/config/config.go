// Package config reads the server's configuration file. It is strict: the
// file carries a version, unknown fields are refused, and a missing setting
// is reported differently from an invalid one, so a typo never silently
// falls back to a default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/runnerapi"
)

// Version is the only config file version this binary reads.
const Version = 1

// Config is the server's configuration.
type Config struct {
	Version  int      `yaml:"version"`
	StateDir string   `yaml:"state_dir"`
	Database Database `yaml:"database"`
	Admin    Admin    `yaml:"admin"`
	Runner   Runner   `yaml:"runner"`
	Pools    Pools    `yaml:"pools"`
	Jobs     Jobs     `yaml:"jobs"`
	Audit    Audit    `yaml:"audit"`
	Log      Log      `yaml:"log"`
	// Storage is the S3-compatible bucket jobs read their inputs from and
	// write their outputs to, through URLs the server presigns; without
	// it, jobs may name only inputs the submitter presigned.
	Storage objects.Config `yaml:"storage"`
}

// Database says where PostgreSQL is. The URL may carry a password, so it
// can live in a file of its own (url_file) instead of the config.
type Database struct {
	URL     string `yaml:"url"`
	URLFile string `yaml:"url_file"`
}

// Admin is the GraphQL admin listener. Without TLS files it serves plain
// HTTP, which is allowed only on a loopback address.
type Admin struct {
	Listen      string `yaml:"listen"`
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
}

// Runner is the runner listener: always TLS, with a certificate from the
// server's own CA for the names runners use to reach it.
type Runner struct {
	Listen string   `yaml:"listen"`
	Names  []string `yaml:"names"`
	// Advertise is where the other server replicas reach this one's
	// runner listener to relay sessions (host:port, the host one of
	// Names; default: the first of Names, at the listening port).
	Advertise string `yaml:"advertise"`
	// CertificateLifetime is how long runner certificates live (Go duration).
	CertificateLifetime string `yaml:"certificate_lifetime"`
}

// CertLifetime is CertificateLifetime parsed (checked by Parse).
func (r Runner) CertLifetime() time.Duration {
	d, _ := time.ParseDuration(r.CertificateLifetime)
	return d
}

// Pools holds the defaults a pool uses until it sets its own.
type Pools struct {
	DefaultLeaseSeconds      int `yaml:"default_lease_seconds"`
	DefaultQueueTimeoutHours int `yaml:"default_queue_timeout_hours"`
}

// Jobs says how long finished jobs are kept.
type Jobs struct {
	// RetentionDays: a job that ended longer ago is deleted, with its
	// events, runs and output.
	RetentionDays int `yaml:"retention_days"`
}

// Audit says how long audit entries are kept.
type Audit struct {
	// RetentionDays: an entry written longer ago is deleted.
	RetentionDays int `yaml:"retention_days"`
}

// Log configures logging.
type Log struct {
	Level string `yaml:"level"`
}

// MissingError says a required setting is absent.
type MissingError struct{ Field string }

func (e *MissingError) Error() string { return fmt.Sprintf("missing required setting %s", e.Field) }

// InvalidError says a setting is present but wrong.
type InvalidError struct{ Field, Reason string }

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return "invalid: " + e.Reason
	}
	return fmt.Sprintf("invalid setting %s: %s", e.Field, e.Reason)
}

// Load reads and checks the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("config %s: file not found", path)
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse reads and checks a config document, filling in defaults.
func Parse(b []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &MissingError{Field: "version"}
		}
		return nil, &InvalidError{Reason: strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n ", ""), "yaml: unmarshal errors:")}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) check() error {
	switch {
	case c.Version == 0:
		return &MissingError{Field: "version"}
	case c.Version != Version:
		return &InvalidError{Field: "version", Reason: fmt.Sprintf("this binary reads version %d, the file says %d", Version, c.Version)}
	}
	switch {
	case c.Database.URL == "" && c.Database.URLFile == "":
		return &MissingError{Field: "database.url (or database.url_file)"}
	case c.Database.URL != "" && c.Database.URLFile != "":
		return &InvalidError{Field: "database", Reason: "set url or url_file, not both"}
	}
	if c.StateDir == "" {
		c.StateDir = "/var/lib/runmesh-server"
	}
	if c.Admin.Listen == "" {
		c.Admin.Listen = ":8444"
	}
	host, _, err := net.SplitHostPort(c.Admin.Listen)
	if err != nil {
		return &InvalidError{Field: "admin.listen", Reason: err.Error()}
	}
	if (c.Admin.TLSCertFile == "") != (c.Admin.TLSKeyFile == "") {
		return &InvalidError{Field: "admin", Reason: "tls_cert_file and tls_key_file go together"}
	}
	if c.Admin.TLSCertFile == "" && !isLoopback(host) {
		return &InvalidError{Field: "admin.listen", Reason: "plain HTTP is allowed only on a loopback address; set admin.tls_cert_file and admin.tls_key_file"}
	}
	if c.Runner.Listen == "" {
		c.Runner.Listen = ":8443"
	}
	if _, _, err := net.SplitHostPort(c.Runner.Listen); err != nil {
		return &InvalidError{Field: "runner.listen", Reason: err.Error()}
	}
	if len(c.Runner.Names) == 0 {
		return &MissingError{Field: "runner.names (the DNS names or addresses runners connect to)"}
	}
	if a := c.Runner.Advertise; a != "" {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return &InvalidError{Field: "runner.advertise", Reason: err.Error()}
		}
		if !slices.Contains(c.Runner.Names, host) {
			return &InvalidError{Field: "runner.advertise", Reason: "its host must be one of runner.names (the listener's certificate names them)"}
		}
	}
	if c.Runner.CertificateLifetime == "" {
		c.Runner.CertificateLifetime = "24h"
	}
	if d, err := time.ParseDuration(c.Runner.CertificateLifetime); err != nil || d < 5*time.Minute || d > 90*24*time.Hour {
		return &InvalidError{Field: "runner.certificate_lifetime", Reason: "a duration between 5m and 2160h"}
	}
	for _, n := range []struct {
		field            string
		v                *int
		def, least, most int
	}{
		{"pools.default_lease_seconds", &c.Pools.DefaultLeaseSeconds, 30, 5, 3600},
		{"pools.default_queue_timeout_hours", &c.Pools.DefaultQueueTimeoutHours, 24, 1, 8760},
		{"jobs.retention_days", &c.Jobs.RetentionDays, 90, 1, 36500},
		{"audit.retention_days", &c.Audit.RetentionDays, 365, 1, 36500},
	} {
		if *n.v == 0 {
			*n.v = n.def
		} else if *n.v < n.least || *n.v > n.most {
			return &InvalidError{Field: n.field, Reason: fmt.Sprintf("between %d and %d", n.least, n.most)}
		}
	}
	if err := c.Storage.Check(); err != nil {
		field, reason, _ := strings.Cut(err.Error(), ": ")
		return &InvalidError{Field: field, Reason: reason}
	}
	switch c.Log.Level {
	case "":
		c.Log.Level = "info"
	case "debug", "info", "warn", "error":
	default:
		return &InvalidError{Field: "log.level", Reason: "one of debug, info, warn, error"}
	}
	return nil
}

// DatabaseURL returns the database URL, reading url_file when that is how
// it is given.
func (c *Config) DatabaseURL() (string, error) {
	if c.Database.URL != "" {
		return c.Database.URL, nil
	}
	b, err := os.ReadFile(c.Database.URLFile)
	if err != nil {
		return "", fmt.Errorf("database.url_file: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return "", &InvalidError{Field: "database.url_file", Reason: "the file is empty"}
	}
	return u, nil
}

func isLoopback(host string) bool { return runnerapi.IsLoopbackHost(host) }
