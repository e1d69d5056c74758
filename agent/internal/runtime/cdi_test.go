package runtime_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

// TestCDIDevicesAreReadFromTheSpecs: nvidia-ctk's YAML and a JSON spec give
// their kind=name devices; a spec that does not parse is named and skipped;
// a directory that is not there has none.
func TestCDIDevicesAreReadFromTheSpecs(t *testing.T) {
	etc, run := t.TempDir(), t.TempDir()
	write := func(dir, name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write(etc, "nvidia.yaml", `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: GPU-aaaa
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}]
- name: all
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}]
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
`)
	write(run, "other.json", `{"cdiVersion": "0.3.0", "kind": "vendor.example/fpga", "devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}]}`)
	write(run, "README", "not a spec")
	devs, err := runtime.CDIDevices([]string{etc, run, filepath.Join(etc, "absent")})
	require.NoError(t, err)
	require.Equal(t, []string{"nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=all", "vendor.example/fpga=0"}, devs)

	write(run, "broken.yaml", "kind: [")
	write(run, "kindless.yaml", "devices: [{name: x}]")
	devs, err = runtime.CDIDevices([]string{etc, run})
	require.ErrorContains(t, err, "broken.yaml: ")
	require.ErrorContains(t, err, `kindless.yaml: kind "" is not vendor/class`)
	require.Equal(t, []string{"nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=all", "vendor.example/fpga=0"}, devs, "the good specs still count")
}
