//go:build nvmlmock

package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// nvmlLibrary, in test builds only (-tags nvmlmock), is go-nvml's own DGX
// A100 mock: RUNMESH_TEST_GPUS=N gives N A100s (default 8), so end-to-end
// tests can show GPUs, and GPUs going missing, without a GPU.
func nvmlLibrary() nvml.Interface {
	n := 8
	if v, err := strconv.Atoi(os.Getenv("RUNMESH_TEST_GPUS")); err == nil {
		n = v
	}
	s := dgxa100.NewWithGPUs(gpus.Multiple(n, gpus.A100_SXM4_40GB)...)
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		// Stable across restarts, like real GPUs.
		dev.UUID = fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i)
		dev.MemoryInfo = nvml.Memory{Total: 40 << 30, Used: 1 << 30, Free: 39 << 30}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: uint32(i)}, nvml.SUCCESS }
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 90000, nvml.SUCCESS }
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	return s
}
