package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/runnerapi"
)

// A lease with inputs or outputs is given back, not run without them.
func TestALeaseWithDataIsGivenBack(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	w := newWorker(t, rt, api)
	ready(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	<-api.asked
	const id = "cccccccc-0000-4000-8000-000000000003"
	api.leases <- []runnerapi.Lease{{LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest", Claim: runnerapi.Resources{Cores: 1},
		Inputs: []runnerapi.LeaseInput{{Name: "a", URL: "https://data.example.com/a"}}}}
	eventually(t, "the lease given back", func() bool {
		r, ok := api.result(id)
		return ok && r.ReturnReason != nil && strings.Contains(*r.ReturnReason, "does not fetch inputs") && !r.HostFault
	})
	if rt.has(rt.host.Paths(id, 1).Unit) {
		t.Fatal("a unit was started for it")
	}
}
