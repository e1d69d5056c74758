package capacity

import (
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/runmesh/runmesh/runnerapi"
)

// DetectedPrefix starts every detected label's key. Declared labels may not
// use it: a declared label never overrides a detected fact.
const DetectedPrefix = runnerapi.DetectedPrefix

// Collector measures the whole runner.
type Collector struct {
	Host     HostProbe
	GPUs     *GPUs
	Declared map[string]string
	// Limits is what the agent proved at start-up about the limits its
	// job containers are held to; it goes with every report.
	Limits *runnerapi.LimitEnforcement
}

// Measure reads everything once.
func (c *Collector) Measure() (runnerapi.Capacity, error) {
	host, err := c.Host.Measure()
	if err != nil {
		return runnerapi.Capacity{}, err
	}
	cap := runnerapi.Capacity{Host: host}
	cap.GPUs, cap.DriverVersion, cap.GPUsUnavailable = c.GPUs.Measure()
	if cap.GPUs == nil {
		cap.GPUs = []runnerapi.GPU{}
	}
	cap.Labels = labels(cap, c.Declared)
	cap.Limits = c.Limits
	return cap, nil
}

// CheckDeclared refuses declared labels that would pass for detected ones.
func CheckDeclared(declared map[string]string) error {
	for k, v := range declared {
		if strings.HasPrefix(k, DetectedPrefix) {
			return fmt.Errorf("label %q: keys under %s are detected by the agent and cannot be declared", k, DetectedPrefix)
		}
		// A label no job selector could name would be of no use.
		if err := runnerapi.CheckLabel(k, v); err != nil {
			return fmt.Errorf("label %q: %w", k, err)
		}
	}
	return nil
}

func labels(c runnerapi.Capacity, declared map[string]string) []runnerapi.Label {
	detected := map[string]string{
		DetectedPrefix + "arch":      runtime.GOARCH,
		DetectedPrefix + "os":        runtime.GOOS,
		DetectedPrefix + "gpu.count": strconv.Itoa(len(c.GPUs)),
	}
	if driver := runnerapi.AsLabelValue(c.DriverVersion); driver != "" {
		detected[DetectedPrefix+"gpu.driver"] = driver
	}
	// As a label value a selector can name: "NVIDIA H200" is NVIDIA-H200.
	if model := runnerapi.AsLabelValue(gpuModel(c.GPUs)); model != "" {
		detected[DetectedPrefix+"gpu.model"] = model
	}
	var out []runnerapi.Label
	for k, v := range detected {
		out = append(out, runnerapi.Label{Key: k, Value: v, Source: runnerapi.LabelDetected})
	}
	for k, v := range declared {
		if _, clash := detected[k]; clash || strings.HasPrefix(k, DetectedPrefix) {
			continue // CheckDeclared refused these at start-up
		}
		out = append(out, runnerapi.Label{Key: k, Value: v, Source: runnerapi.LabelDeclared})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func gpuModel(gpus []runnerapi.GPU) string {
	if len(gpus) == 0 {
		return ""
	}
	for _, g := range gpus[1:] {
		if g.Name != gpus[0].Name {
			return "mixed"
		}
	}
	return gpus[0].Name
}
