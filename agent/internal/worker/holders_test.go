package worker

import (
	"context"
	"fmt"
	"testing"

	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/runnerapi"
)

// The GPUs a job holds are named with the job, for the metrics: exactly
// those of its claim, and none once it has ended.
func TestGPUHoldersNameTheJobOnItsGPUs(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	w := newWorker(t, sys, api)
	var gpus []runnerapi.GPU
	for i := range 8 {
		gpus = append(gpus, runnerapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Healthy: true})
		sys.AddCDIDevices("nvidia.com/gpu=" + fmt.Sprintf("GPU-%d", i))
	}
	w.Capacity = func() (runnerapi.Capacity, bool) {
		return runnerapi.Capacity{Host: runnerapi.HostCapacity{Cores: 8, MemoryMiB: 16384}, GPUs: gpus}, true
	}
	ready(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	<-api.asked
	const id = "cccccccc-0000-4000-8000-000000000001"
	api.leases <- []runnerapi.Lease{{LeaseID: id, Attempt: 2, Image: "localhost/busybox:latest", Organisation: "acme", Pool: "gpu",
		Claim: runnerapi.Resources{Cores: 1, GPUs: 2}}}
	p := sys.Host().Paths(id, 2)
	eventually(t, "the unit", func() bool { return sys.Has(p.Unit) })

	held := w.GPUHolders()
	if len(held) != 2 {
		t.Fatalf("%d GPUs held, want the claim's 2: %v", len(held), held)
	}
	for g, h := range held {
		want := GPUHolder{Organisation: "acme", Pool: "gpu", Job: id, Lease: id + "/2"}
		if h != want {
			t.Fatalf("GPU %s: %+v, want %+v", g, h, want)
		}
	}

	sys.End(p.Unit, 0)
	eventually(t, "the result sent", func() bool { _, ok := api.result(id); return ok })
	answer(w, nil)(context.Background()) // the server has the result: the job is let go
	eventually(t, "no GPU held once the job has ended", func() bool { return len(w.GPUHolders()) == 0 })
}
