package capacity

import (
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/runmesh/runmesh/runnerapi"
)

// GPUs measures GPUs through NVML and knows which ones are out of service:
// those NVML's health events showed failing here, and those the server
// holds a fault against (see Remember).
type GPUs struct {
	lib nvml.Interface
	now func() time.Time

	mu     sync.Mutex // guards what follows
	reason string     // why NVML is unusable; "" when it works
	faults faults
}

// NewGPUs uses lib: nvml.New() on a real host, a go-nvml mock in tests. It
// initialises NVML; when that fails the GPUs report none, and why.
func NewGPUs(lib nvml.Interface) *GPUs {
	g := &GPUs{lib: lib, now: time.Now, faults: newFaults()}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		g.reason = describe(ret)
	}
	return g
}

// Close shuts NVML down.
func (g *GPUs) Close() {
	if g.Unavailable() == "" {
		g.lib.Shutdown()
	}
}

// Unavailable says why NVML cannot be used ("" when it can).
func (g *GPUs) Unavailable() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason
}

// NoDriver is why NVML cannot be used on a host without the NVIDIA driver:
// a CPU host, which lacks nothing.
const NoDriver = "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this host"

func describe(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return NoDriver
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel driver is not loaded"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVIDIA driver and library versions do not match (a driver update awaiting a reboot?)"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open the NVIDIA devices"
	default:
		return "NVML: " + ret.Error()
	}
}

// Measure reads every GPU. A metric the GPU does not support stays zero; a
// GPU whose UUID cannot be read is left out, never made up.
func (g *GPUs) Measure() (gpus []runnerapi.GPU, driver, reason string) {
	if r := g.Unavailable(); r != "" {
		return nil, "", r
	}
	driver, _ = g.lib.SystemGetDriverVersion()
	n, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, driver, "NVML cannot count GPUs: " + ret.Error()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range n {
		d, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		gpu := runnerapi.GPU{Index: i, UUID: uuid, Healthy: true}
		gpu.Name, _ = d.GetName()
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			gpu.MemoryTotalMiB = int64(mem.Total / (1 << 20))
			gpu.MemoryUsedMiB = int64(mem.Used / (1 << 20))
			gpu.MemoryFreeMiB = int64(mem.Free / (1 << 20))
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			gpu.Utilisation = int(u.Gpu)
		}
		if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			gpu.TemperatureC = int(t)
		}
		if mw, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			gpu.PowerWatts = float64(mw) / 1000
		}
		g.faults.mark(&gpu)
		gpus = append(gpus, gpu)
	}
	sort.Slice(gpus, func(a, b int) bool { return gpus[a].Index < gpus[b].Index })
	return gpus, driver, ""
}
