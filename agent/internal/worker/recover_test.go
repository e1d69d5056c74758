package worker

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// Without survivors there is nothing to ask the server: the check makes no
// heartbeat of its own.
func TestRecoverAsksNothingWithoutSurvivors(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	w := newWorker(t, rt, api)
	beats := 0
	proof, err := w.Recover(context.Background(), func(ctx context.Context) error { beats++; return answer(w, nil)(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	if beats != 0 || !proof.Isolated || proof.SurvivorsFound != 0 {
		t.Fatalf("%d heartbeats, proof %+v", beats, proof)
	}
}

// Units of two attempts of one lease (a restart between them): the newest
// is the one held and asked about, whichever is listed first; the older is
// stopped.
func TestRecoverHoldsTheNewestAttemptOfALease(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	const lease = "aaaaaaaa-0000-4000-8000-000000000003"
	older, newer := rt.addUnit(lease, 1), rt.addUnit(lease, 2)
	w := newWorker(t, rt, api)
	var asked []runnerapi.HeldLease
	var mu sync.Mutex
	proof, err := w.Recover(context.Background(), func(ctx context.Context) error {
		mu.Lock()
		asked = append(asked, w.Held()...)
		mu.Unlock()
		return answer(w, nil)(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) == 0 || asked[0].Attempt != 2 {
		t.Fatalf("asked about %+v, want attempt 2", asked)
	}
	if proof.Adopted != 1 || !rt.has(newer) || rt.has(older) {
		t.Fatalf("proof %+v; newer kept %v, older kept %v", proof, rt.has(newer), rt.has(older))
	}
}

// What the check stops leaves nothing of its own behind (a stopped unit's
// output file), and a stop that worked is no warning. The proof names this
// boot.
func TestRecoverCleansUpWhatItStops(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	const lease = "aaaaaaaa-0000-4000-8000-000000000004"
	rt.addUnit(lease, 1)
	logPath := rt.host.Paths(lease, 1).Log
	if err := os.WriteFile(logPath, []byte("output\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt.containers["runmesh-job-stray-2"] = runtime.Container{Name: "runmesh-job-stray-2", LeaseID: "stray", Attempt: 1}
	w := newWorker(t, rt, api)
	var logs bytes.Buffer
	w.Log = slog.New(slog.NewTextHandler(&logs, nil))
	proof, err := w.Recover(context.Background(), answer(w, map[string]string{lease: runnerapi.LeaseGone}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logPath); !os.IsNotExist(err) {
		t.Fatalf("the stopped unit's output file is still there: %v", err)
	}
	for _, warning := range []string{`level=WARN msg=stop`, `level=WARN msg=remove`} {
		if strings.Contains(logs.String(), warning) {
			t.Fatalf("a warning for a stop that worked:\n%s", logs.String())
		}
	}
	if id, err := os.ReadFile(BootIDFile); err == nil && proof.BootID != strings.TrimSpace(string(id)) {
		t.Fatalf("boot id %q, this boot is %q", proof.BootID, id)
	}
}
