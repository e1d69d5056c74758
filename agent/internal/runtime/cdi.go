package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// CDISpecDirs are where podman reads Container Device Interface specs
// (nvidia-ctk cdi generate writes /etc/cdi/nvidia.yaml; the NVIDIA
// Container Toolkit's refresh service, /var/run/cdi).
var CDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// CDIDevices lists the fully qualified device names (kind=name) the CDI
// specs in dirs declare. A spec that does not parse is skipped with the
// reason in the error, which names every such file; the devices of the
// others are still listed. A directory that does not exist has none.
func CDIDevices(dirs []string) ([]string, error) {
	var names, bad []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || ext != ".yaml" && ext != ".json" {
				continue
			}
			path := filepath.Join(dir, e.Name())
			devs, err := cdiSpecDevices(path)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", path, err))
				continue
			}
			names = append(names, devs...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(bad) > 0 {
		return names, fmt.Errorf("CDI specs skipped: %s", strings.Join(bad, "; "))
	}
	return names, nil
}

// cdiSpecDevices reads one spec (YAML, or JSON, which YAML reads too).
func cdiSpecDevices(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var spec struct {
		Kind    string `yaml:"kind"`
		Devices []struct {
			Name string `yaml:"name"`
		} `yaml:"devices"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return nil, err
	}
	vendor, class, ok := strings.Cut(spec.Kind, "/")
	if !ok || vendor == "" || class == "" {
		return nil, fmt.Errorf("kind %q is not vendor/class", spec.Kind)
	}
	out := make([]string, 0, len(spec.Devices))
	for _, d := range spec.Devices {
		if d.Name != "" {
			out = append(out, spec.Kind+"="+d.Name)
		}
	}
	return out, nil
}

// hasAll: every GPU (by UUID) has its device among names.
func hasAll(names, gpus []string) bool {
	for _, g := range gpus {
		if !slices.Contains(names, "nvidia.com/gpu="+g) {
			return false
		}
	}
	return true
}
