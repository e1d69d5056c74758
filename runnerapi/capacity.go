package runnerapi

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// DetectedPrefix starts every detected label's key; declared labels may
// not use it, so a declared label never passes for a detected fact.
const DetectedPrefix = "runmesh.io/"

// PathHeartbeat is where a runner reports itself.
const PathHeartbeat = "/v1/heartbeat"

// Capacity is what a runner measured about itself.
type Capacity struct {
	Host HostCapacity `json:"host"`
	GPUs []GPU        `json:"gpus"`
	// GPUsUnavailable says why there are no GPUs when NVML could not be
	// used (library not found, driver mismatch...). Empty when NVML works,
	// even if it finds no GPU.
	GPUsUnavailable string  `json:"gpus_unavailable,omitempty"`
	DriverVersion   string  `json:"driver_version,omitempty"`
	Labels          []Label `json:"labels,omitempty"`
	// Limits says which limits the runner's job containers are held to.
	// An agent that does not say enforces nothing.
	Limits *LimitEnforcement `json:"limits,omitempty"`
	// Images is what the runner has of its pool's images.
	Images []ImageState `json:"images,omitempty"`
}

// LimitEnforcement is what the agent proved about its job containers at
// start-up. Reason says what is missing whenever a limit is not enforced.
type LimitEnforcement struct {
	Memory bool   `json:"memory"`
	CPU    bool   `json:"cpu"`
	Pids   bool   `json:"pids"`
	Reason string `json:"reason,omitempty"`
}

// HostCapacity is the host's share of CPU, memory and disk, as limited by
// its cgroup where one applies.
type HostCapacity struct {
	Hostname string `json:"hostname"`
	// Cores may be fractional (a CPU quota of 2.5 cores).
	Cores              float64 `json:"cores"`
	MemoryMiB          int64   `json:"memory_mib"`
	MemoryAvailableMiB int64   `json:"memory_available_mib"`
	DiskFreeMiB        int64   `json:"disk_free_mib"`
	// Limited says which figures a cgroup limit lowered ("cpu", "memory").
	Limited []string `json:"limited,omitempty"`
}

// GPU is one GPU as NVML reports it.
type GPU struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	Name           string  `json:"name"`
	MemoryTotalMiB int64   `json:"memory_total_mib"`
	MemoryUsedMiB  int64   `json:"memory_used_mib"`
	MemoryFreeMiB  int64   `json:"memory_free_mib"`
	Utilisation    int     `json:"utilisation_percent"`
	TemperatureC   int     `json:"temperature_c"`
	PowerWatts     float64 `json:"power_watts"`
	Healthy        bool    `json:"healthy"`
	// Health is the evidence when unhealthy, e.g. "XID 79 at 2026-11-30T12:00:00Z".
	Health string `json:"health,omitempty"`
	// Fault is that evidence as NVML gave it, when a health event was the
	// cause.
	Fault *GPUFault `json:"fault,omitempty"`
}

// Label sources.
const (
	LabelDetected = "detected"
	LabelDeclared = "declared"
)

// Label is a key=value fact about the runner and where it came from.
type Label struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Condition is one named part of the agent's health.
type Condition struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Severity string `json:"severity"` // info, warning, error
	Title    string `json:"title"`
}

// HeartbeatRequest is sent every leaseSeconds/3.
type HeartbeatRequest struct {
	// RunnerID, when given, must be the runner the certificate names.
	RunnerID     string      `json:"runner_id,omitempty"`
	AgentVersion string      `json:"agent_version"`
	Capacity     Capacity    `json:"capacity"`
	Health       []Condition `json:"health,omitempty"`
	// Leases are the leases the runner holds.
	Leases []HeldLease `json:"leases,omitempty"`
	// Recovery is sent after every start of the agent, until an answer
	// says it was recorded.
	Recovery *RecoveryProof `json:"recovery,omitempty"`
}

// HeartbeatResponse tells the runner when to come back.
type HeartbeatResponse struct {
	// NextHeartbeatSeconds is leaseSeconds/3 of the runner's pool.
	NextHeartbeatSeconds int  `json:"next_heartbeat_seconds"`
	Quarantined          bool `json:"quarantined,omitempty"`
	Draining             bool `json:"draining,omitempty"`
	// Leases answers each held lease: CONTINUE, CANCEL or GONE.
	Leases []LeaseAnswer `json:"leases,omitempty"`
	// RecoveryRecorded: the request's recovery proof is stored.
	RecoveryRecorded bool `json:"recovery_recorded,omitempty"`
	// GPUFaults are the faults the server holds against the runner's GPUs,
	// this heartbeat's included: each such GPU stays out of service, on
	// the server's word, until an administrator clears it
	// (clearGpuHealth), whatever the agent remembers.
	GPUFaults []GPUFault `json:"gpu_faults,omitempty"`
	// PoolImages are the runner's pool's images (Pool.images), which it
	// pulls before it takes work that needs them.
	PoolImages []string `json:"pool_images,omitempty"`
}

// Bounds on what a runner may claim: beyond them the report is impossible,
// not merely large.
const (
	MaxGPUs          = 64
	MaxGPUMemoryMiB  = 1 << 30 // 1 PiB
	MaxCores         = 4096
	MaxHostMemoryMiB = 1 << 30 // 1 PiB of RAM or disk on one host: beyond any real one
	MaxLabels        = 64
)

// textField is a text of a report, its name and its bound in bytes.
type textField struct {
	name, v string
	max     int
}

// checkTexts checks each field with CheckText, named after prefix.
func checkTexts(prefix string, fields ...textField) error {
	for _, f := range fields {
		if err := CheckText(prefix+f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

// CheckText refuses a string PostgreSQL cannot store or a person cannot
// read: a NUL, other control characters, invalid UTF-8, or more than max
// bytes.
func CheckText(name, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s: longer than %d bytes", name, max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s: not UTF-8", name)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: control characters are not allowed", name)
		}
	}
	return nil
}

// Clip shortens s to at most n bytes, marking the cut with "…" and never
// splitting a character: text from a tool (podman's stderr, say) made fit
// a bounded field.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}

// CheckCapacity refuses impossible values: negative or non-finite numbers,
// more than MaxGPUs GPUs, more than a PiB of memory on one GPU, used and
// free memory above total, duplicate GPU UUIDs or indices, and text that is
// too long or holds control characters.
func CheckCapacity(c Capacity) error {
	h := c.Host
	if err := checkTexts("", textField{"host.hostname", h.Hostname, 255}, textField{"gpus_unavailable", c.GPUsUnavailable, 512},
		textField{"driver_version", c.DriverVersion, 64}); err != nil {
		return err
	}
	if c.Limits != nil {
		if err := CheckText("limits.reason", c.Limits.Reason, 512); err != nil {
			return err
		}
	}
	if err := checkHost(h); err != nil {
		return err
	}
	if err := checkGPUs(c.GPUs); err != nil {
		return err
	}
	if err := checkImages(c.Images); err != nil {
		return err
	}
	return checkLabels(c.Labels)
}

func checkHost(h HostCapacity) error {
	if h.MemoryAvailableMiB > h.MemoryMiB {
		return fmt.Errorf("host: %d MiB available of %d", h.MemoryAvailableMiB, h.MemoryMiB)
	}
	if len(h.Limited) > 4 {
		return fmt.Errorf("host.limited: too many entries")
	}
	for _, l := range h.Limited {
		if l != "cpu" && l != "memory" {
			return fmt.Errorf("host.limited: %q is neither cpu nor memory", l)
		}
	}
	if math.IsNaN(h.Cores) || math.IsInf(h.Cores, 0) || h.Cores < 0 || h.Cores > MaxCores {
		return fmt.Errorf("host.cores: %v is impossible", h.Cores)
	}
	for name, v := range map[string]int64{"memory_mib": h.MemoryMiB, "memory_available_mib": h.MemoryAvailableMiB, "disk_free_mib": h.DiskFreeMiB} {
		if v < 0 || v > MaxHostMemoryMiB {
			return fmt.Errorf("host.%s: %d is impossible", name, v)
		}
	}
	return nil
}

func checkGPUs(gpus []GPU) error {
	if len(gpus) > MaxGPUs {
		return fmt.Errorf("gpus: %d GPUs is more than %d", len(gpus), MaxGPUs)
	}
	seen, seenIndex := map[string]bool{}, map[int]bool{}
	for i, g := range gpus {
		if err := checkTexts(fmt.Sprintf("gpus[%d].", i), textField{"uuid", g.UUID, 128}, textField{"name", g.Name, 128},
			textField{"health", g.Health, 512}); err != nil {
			return err
		}
		switch {
		case g.UUID == "":
			return fmt.Errorf("gpus[%d].uuid: missing", i)
		case seen[g.UUID]:
			return fmt.Errorf("gpus[%d].uuid: %s appears twice", i, g.UUID)
		case g.Index < 0 || g.Index >= MaxGPUs:
			return fmt.Errorf("gpus[%d].index: %d is impossible", i, g.Index)
		case seenIndex[g.Index]:
			return fmt.Errorf("gpus[%d].index: %d appears twice", i, g.Index)
		case g.MemoryTotalMiB < 0 || g.MemoryTotalMiB > MaxGPUMemoryMiB:
			return fmt.Errorf("gpus[%d].memory_total_mib: %d is impossible", i, g.MemoryTotalMiB)
		case g.MemoryUsedMiB < 0 || g.MemoryFreeMiB < 0 || g.MemoryUsedMiB+g.MemoryFreeMiB > g.MemoryTotalMiB:
			return fmt.Errorf("gpus[%d]: used %d and free %d MiB do not fit in %d", i, g.MemoryUsedMiB, g.MemoryFreeMiB, g.MemoryTotalMiB)
		case g.Utilisation < 0 || g.Utilisation > 100:
			return fmt.Errorf("gpus[%d].utilisation_percent: %d is impossible", i, g.Utilisation)
		case g.TemperatureC < -50 || g.TemperatureC > 200:
			return fmt.Errorf("gpus[%d].temperature_c: %d is impossible", i, g.TemperatureC)
		case math.IsNaN(g.PowerWatts) || math.IsInf(g.PowerWatts, 0) || g.PowerWatts < 0 || g.PowerWatts > 100000:
			return fmt.Errorf("gpus[%d].power_watts: %v is impossible", i, g.PowerWatts)
		}
		if err := checkFault(i, g); err != nil {
			return err
		}
		seen[g.UUID], seenIndex[g.Index] = true, true
	}
	return nil
}

func checkLabels(labels []Label) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("labels: more than %d", MaxLabels)
	}
	for i, l := range labels {
		if l.Key == "" {
			return fmt.Errorf("labels[%d].key: missing", i)
		}
		if err := CheckText(fmt.Sprintf("labels[%d].key", i), l.Key, MaxLabelKeyBytes); err != nil {
			return err
		}
		if err := CheckText(fmt.Sprintf("labels[%d].value", i), l.Value, 256); err != nil {
			return err
		}
		if l.Source != LabelDetected && l.Source != LabelDeclared {
			return fmt.Errorf("labels[%d].source: %q is neither %s nor %s", i, l.Source, LabelDetected, LabelDeclared)
		}
		if l.Source == LabelDeclared && strings.HasPrefix(l.Key, DetectedPrefix) {
			return fmt.Errorf("labels[%d]: %s keys are detected, never declared", i, DetectedPrefix)
		}
	}
	return nil
}

// Interval is leaseSeconds/3, never below one second.
func Interval(leaseSeconds int) time.Duration {
	return max(time.Duration(leaseSeconds)*time.Second/3, time.Second)
}
