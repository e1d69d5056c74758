package heartbeat

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/capacity"
	"github.com/runmesh/runmesh/agent/internal/capacity/nvmltest"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// controlPlane answers heartbeats with status (200 unless set) and keeps
// the last request it was sent.
type controlPlane struct {
	status atomic.Int32
	last   atomic.Pointer[runnerapi.HeartbeatRequest]
}

func (c *controlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.HeartbeatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.last.Store(&req)
	if s := c.status.Load(); s != 0 {
		w.WriteHeader(int(s))
		json.NewEncoder(w).Encode(runnerapi.Error{Error: runnerapi.ErrorBody{Code: runnerapi.CodeInternal, Message: "internal error"}})
		return
	}
	json.NewEncoder(w).Encode(runnerapi.HeartbeatResponse{NextHeartbeatSeconds: 10})
}

// carried is the condition name as the last beat carried it.
func (c *controlPlane) carried(t *testing.T, name string) runnerapi.Condition {
	t.Helper()
	req := c.last.Load()
	require.NotNil(t, req, "no beat was sent")
	for _, h := range req.Health {
		// What the control plane checks of every condition it is sent.
		require.NoError(t, runnerapi.CheckText("name", h.Name, 64))
		require.NoError(t, runnerapi.CheckText("title", h.Title, 512), "condition %s", h.Name)
		require.Contains(t, []string{"info", "warning", "error"}, h.Severity)
	}
	for _, h := range req.Health {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("the beat carried no condition %s: %+v", name, req.Health)
	return runnerapi.Condition{}
}

// The conditions follow what the loop sees: the control plane refusing a
// beat, a GPU's XID event. Every beat carries the registry's conditions,
// those the loop does not set among them, in a form the control plane
// accepts.
func TestBeatsCarryTheConditionsAndTheyFollowEvents(t *testing.T) {
	t.Parallel()
	cp := &controlPlane{}
	srv := httptest.NewTLSServer(cp)
	defer srv.Close()
	client, err := runnerclient.Anonymous(srv.URL, srv.Certificate())
	require.NoError(t, err)
	lib, xid := nvmltest.XIDServer()
	gpus := capacity.NewGPUs(lib)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go gpus.WatchHealth(ctx, slog.New(slog.DiscardHandler))

	reg := health.NewRegistry()
	l := &Loop{
		Client: client, Collector: &capacity.Collector{Host: capacity.HostProbe{WorkDir: t.TempDir()}, GPUs: gpus},
		Log: slog.New(slog.DiscardHandler), Health: reg,
		Beats: reg.Register("heartbeat", "heartbeats answered", health.Error),
		NVML:  reg.Register("nvml", "GPU measurement (NVML)", health.Warning),
		GPUs:  reg.Register("gpu", "GPU health", health.Error),
	}
	// A condition another part sets, with a tool's words in it.
	reg.Register("runtime", "job runtime", health.Error).SetUnhealthy("cannot run jobs: podman said \x1b[31mno\x1b[0m \xff" + strings.Repeat("x", 600))

	require.NoError(t, l.Once(ctx))
	require.Equal(t, runnerapi.Condition{Name: "nvml", OK: true, Severity: "warning", Title: "GPU measurement (NVML): 8 GPUs, driver 550.54.15"}, cp.carried(t, "nvml"))
	require.Equal(t, runnerapi.Condition{Name: "gpu", OK: true, Severity: "error", Title: "GPU health: 8 GPUs healthy"}, cp.carried(t, "gpu"))
	rt := cp.carried(t, "runtime")
	require.False(t, rt.OK)
	require.Equal(t, "error", rt.Severity)
	require.True(t, strings.HasPrefix(rt.Title, "job runtime: cannot run jobs: podman said  [31mno [0m  xxx"), rt.Title)
	require.True(t, strings.HasSuffix(rt.Title, "…"), "clipped")
	require.True(t, reg.Conditions()[0].OK, "an answered beat")

	// The control plane stops answering: the heartbeat condition says so,
	// and the next beat it answers carries that.
	cp.status.Store(http.StatusInternalServerError)
	require.Error(t, l.Once(ctx))
	beats := reg.Conditions()[0]
	require.False(t, beats.OK)
	require.Contains(t, beats.Text, "HTTP 500")
	cp.status.Store(0)
	require.NoError(t, l.Once(ctx))
	hb := cp.carried(t, "heartbeat")
	require.False(t, hb.OK)
	require.Contains(t, hb.Title, "heartbeats answered: the server refused")
	require.True(t, reg.Conditions()[0].OK)

	// XID 79: the GPU fell off the bus.
	xid <- nvml.EventData{Device: lib.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	require.Eventually(t, func() bool {
		require.NoError(t, l.Once(ctx))
		return !cp.carried(t, "gpu").OK
	}, 5*time.Second, 10*time.Millisecond)
	uuid, _ := lib.Devices[3].GetUUID()
	require.Regexp(t, `^GPU health: GPU 3 \(`+uuid+`\): XID 79 at `, cp.carried(t, "gpu").Title)
	require.ErrorContains(t, reg.Err(), "gpu: GPU 3")
}

// A measurement that fails is a failed beat: nothing is sent, and the
// heartbeat condition says why.
func TestAFailedMeasurementIsAFailedBeat(t *testing.T) {
	t.Parallel()
	reg := health.NewRegistry()
	l := &Loop{Collector: &capacity.Collector{Host: capacity.HostProbe{Root: t.TempDir()}}, Health: reg,
		Beats: reg.Register("heartbeat", "heartbeats answered", health.Error)}
	require.Error(t, l.Once(context.Background()))
	require.False(t, reg.Conditions()[0].OK)
	require.Contains(t, reg.Conditions()[0].Text, "measure capacity")
}

// A host without the NVIDIA driver is a CPU host: GPU measurement is not
// degraded there. NVML failing where a driver is, is.
func TestNoDriverIsAHealthyCPUHost(t *testing.T) {
	t.Parallel()
	reg := health.NewRegistry()
	l := &Loop{NVML: reg.Register("nvml", "GPU measurement (NVML)", health.Warning)}
	l.measured(runnerapi.Capacity{GPUsUnavailable: capacity.NoDriver})
	require.True(t, reg.Healthy())
	require.Equal(t, "healthy (1 condition)", reg.Summary())
	l.measured(runnerapi.Capacity{GPUsUnavailable: "the NVIDIA kernel driver is not loaded"})
	require.Contains(t, reg.Summary(), "degraded: nvml: the NVIDIA kernel driver is not loaded")
}

// A beat stuck on a connection that died without a word fails within an
// interval (a third of the lease; 2 s at the least), so that the retry
// can still save the lease, instead of waiting out a fixed 30 s.
func TestABeatStuckOnADeadConnectionFailsWithinAnInterval(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client leave
		<-r.Context().Done()               // and never answers
	}))
	defer srv.Close()
	client, err := runnerclient.Anonymous(srv.URL, srv.Certificate())
	require.NoError(t, err)
	lib, _ := nvmltest.XIDServer()
	l := &Loop{Client: client, Collector: &capacity.Collector{Host: capacity.HostProbe{WorkDir: t.TempDir()}, GPUs: capacity.NewGPUs(lib)},
		Log: slog.New(slog.DiscardHandler)}
	l.every.Store(int64(3 * time.Second)) // a 9 s lease
	start := time.Now()
	require.Error(t, l.Once(context.Background()))
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 3*time.Second)
	require.Less(t, took, 5*time.Second, "a stuck beat outlived its interval")

	require.Equal(t, 2*time.Second, beatTimeout(time.Second), "at the least")
	require.Equal(t, 30*time.Second, beatTimeout(time.Minute), "at the most")
}
