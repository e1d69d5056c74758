package capacity

import (
	"context"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/runmesh/runmesh/runnerapi"
)

// faults are the GPUs out of service. A fault seen here is reported until
// the server's answer lists it; from then on the server's list decides, so
// a fault an administrator cleared (clearGpuHealth) is forgotten here too,
// and a GPU the server holds a fault against stays out of service after a
// restart, before any event is seen again.
type faults struct {
	seen   map[string]runnerapi.GPUFault // by this agent's health events
	acked  map[string]bool               // seen faults the server has listed
	server map[string]runnerapi.GPUFault // the server's last list
}

func newFaults() faults {
	return faults{seen: map[string]runnerapi.GPUFault{}, acked: map[string]bool{}, server: map[string]runnerapi.GPUFault{}}
}

// mark takes gpu out of service when a fault is known for it. Only a fault
// seen here goes with the report as evidence: the server has its own.
func (f faults) mark(gpu *runnerapi.GPU) {
	if seen, ok := f.seen[gpu.UUID]; ok {
		gpu.Healthy, gpu.Health, gpu.Fault = false, seen.Evidence(), &seen
		return
	}
	if held, ok := f.server[gpu.UUID]; ok {
		gpu.Healthy, gpu.Health = false, held.Evidence()
	}
}

// Remember takes the server's list of the faults it holds against this
// runner's GPUs (every heartbeat answer carries it).
func (g *GPUs) Remember(held []runnerapi.GPUFault) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults.server = runnerapi.Faulted(held)
	for uuid := range g.faults.seen {
		_, listed := g.faults.server[uuid]
		switch {
		case listed:
			g.faults.acked[uuid] = true
		case g.faults.acked[uuid]:
			// Listed once, not any more: an administrator cleared it.
			delete(g.faults.seen, uuid)
			delete(g.faults.acked, uuid)
		}
	}
}

// OutOfService marks, in a report measured before Remember, the GPUs the
// server holds a fault against.
func (g *GPUs) OutOfService(gpus []runnerapi.GPU) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range gpus {
		g.faults.mark(&gpus[i])
	}
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
	f := runnerapi.GPUFault{ObservedAt: g.now().UTC().Truncate(time.Second)}
	switch {
	case ev.EventType&nvml.EventTypeXidCriticalError != 0 && !harmlessXIDs[ev.EventData]:
		f.XID = int(min(ev.EventData, 1<<20))
	case ev.EventType&nvml.EventTypeDoubleBitEccError != 0:
	default:
		return
	}
	uuid, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		log.Error("GPU health event for a GPU without a readable UUID", "evidence", f.Evidence())
		return
	}
	f.UUID = uuid
	// The counts are evidence, not the cause: a GPU that cannot count
	// reports zeros.
	if n, ret := ev.Device.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		f.ECCUncorrected = n
	}
	if n, ret := ev.Device.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		f.ECCCorrected = n
	}
	g.mu.Lock()
	if _, already := g.faults.seen[uuid]; !already {
		g.faults.seen[uuid] = f
	}
	g.mu.Unlock()
	log.Error("GPU marked unhealthy", "uuid", uuid, "evidence", f.Evidence())
}
