//go:build nvmlmock

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// nvmlLibrary, in test builds only (-tags nvmlmock), is go-nvml's own DGX
// A100 mock: RUNMESH_TEST_GPUS=N gives N A100s (default 8), so end-to-end
// tests can show GPUs, and GPUs going missing, without a GPU.
// RUNMESH_TEST_XID=INDEX:XID raises that XID on that GPU once, soon after
// the agent starts watching for health events.
func nvmlLibrary() nvml.Interface {
	n := 8
	if v, err := strconv.Atoi(os.Getenv("RUNMESH_TEST_GPUS")); err == nil {
		n = v
	}
	s := dgxa100.NewWithGPUs(gpus.Multiple(n, gpus.A100_SXM4_40GB)...)
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		// Stable across restarts, like real GPUs.
		dev.UUID = fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i)
		dev.MemoryInfo = nvml.Memory{Total: 40 << 30, Used: 1 << 30, Free: 39 << 30}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: uint32(i)}, nvml.SUCCESS }
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 90000, nvml.SUCCESS }
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(kind nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
			if kind == nvml.MEMORY_ERROR_TYPE_CORRECTED {
				return 2, nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		}
	}
	events := make(chan nvml.EventData, 1)
	if index, xid, ok := strings.Cut(os.Getenv("RUNMESH_TEST_XID"), ":"); ok {
		i, err1 := strconv.Atoi(index)
		x, err2 := strconv.ParseUint(xid, 10, 64)
		if err1 == nil && err2 == nil && i >= 0 && i < n {
			events <- nvml.EventData{Device: s.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: x}
		}
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(timeout uint32) (nvml.EventData, nvml.Return) {
				select {
				case ev := <-events:
					return ev, nvml.SUCCESS
				case <-time.After(time.Duration(timeout) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return s
}
