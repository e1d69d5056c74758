package capacity

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/runmesh/runmesh/runnerapi"
)

// GPUs measures GPUs through NVML and remembers which ones NVML events
// have shown to be unhealthy.
type GPUs struct {
	lib nvml.Interface
	now func() time.Time

	mu        sync.Mutex // guards reason and unhealthy
	reason    string     // why NVML is unusable; "" when it works
	unhealthy map[string]string
}

// NewGPUs uses lib: nvml.New() on a real host, a go-nvml mock in tests. It
// initialises NVML; when that fails the GPUs report none, and why.
func NewGPUs(lib nvml.Interface) *GPUs {
	g := &GPUs{lib: lib, now: time.Now, unhealthy: map[string]string{}}
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
		if why, bad := g.unhealthy[uuid]; bad {
			gpu.Healthy, gpu.Health = false, why
		}
		gpus = append(gpus, gpu)
	}
	sort.Slice(gpus, func(a, b int) bool { return gpus[a].Index < gpus[b].Index })
	return gpus, driver, ""
}

// harmlessXIDs are raised by what an application did, not by a failing GPU
// (the same list the Kubernetes device plugin skips): they do not make a GPU
// unhealthy.
var harmlessXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// WatchHealth listens for critical XID and uncorrectable ECC events until
// ctx ends, marking the GPU they name unhealthy with the evidence. GPUs
// that cannot report events are skipped.
func (g *GPUs) WatchHealth(ctx context.Context, log *slog.Logger) {
	if g.Unavailable() != "" {
		return
	}
	set, ret := g.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		log.Warn("GPU health events unavailable", "err", ret.Error())
		return
	}
	defer set.Free()
	const wanted = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError
	n, _ := g.lib.DeviceGetCount()
	for i := range n {
		d, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		supported, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&wanted == 0 {
			log.Info("GPU does not report health events", "index", i)
			continue
		}
		if ret := d.RegisterEvents(supported&wanted, set); ret != nvml.SUCCESS {
			log.Warn("register GPU health events", "index", i, "err", ret.Error())
		}
	}
	for ctx.Err() == nil {
		ev, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			log.Warn("waiting for GPU events", "err", ret.Error())
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
			continue
		}
		g.record(ev, log)
	}
}

func (g *GPUs) record(ev nvml.EventData, log *slog.Logger) {
	var why string
	switch {
	case ev.EventType&nvml.EventTypeXidCriticalError != 0 && !harmlessXIDs[ev.EventData]:
		why = fmt.Sprintf("XID %d at %s", ev.EventData, g.now().UTC().Format(time.RFC3339))
	case ev.EventType&nvml.EventTypeDoubleBitEccError != 0:
		why = fmt.Sprintf("uncorrectable (double-bit) ECC error at %s", g.now().UTC().Format(time.RFC3339))
	default:
		return
	}
	uuid, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		log.Error("GPU health event for a GPU without a readable UUID", "evidence", why)
		return
	}
	g.mu.Lock()
	if _, already := g.unhealthy[uuid]; !already {
		g.unhealthy[uuid] = why
	}
	g.mu.Unlock()
	log.Error("GPU marked unhealthy", "uuid", uuid, "evidence", why)
}
