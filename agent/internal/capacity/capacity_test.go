package capacity_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/capacity"
	"github.com/runmesh/runmesh/agent/internal/capacity/nvmltest"
	"github.com/runmesh/runmesh/runnerapi"
)

// dgx is go-nvml's DGX A100 mock with the metrics it leaves unset filled in.
func dgx(t *testing.T) *dgxa100.Server {
	t.Helper()
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		i := i
		dev.MemoryInfo = nvml.Memory{Total: 40 << 30, Used: uint64(i) << 30, Free: (40 - uint64(i)) << 30}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(40 + i), nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100000 + 1000*i), nvml.SUCCESS }
		// GPU 5 counts ECC errors (1 uncorrected, 4 corrected); the rest cannot.
		dev.GetTotalEccErrorsFunc = func(kind nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
			if i != 5 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			if kind == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
				return 1, nvml.SUCCESS
			}
			return 4, nvml.SUCCESS
		}
	}
	return s
}

func TestGPUsFromNVML(t *testing.T) {
	t.Parallel()
	g := capacity.NewGPUs(dgx(t))
	gpus, driver, reason := g.Measure()
	require.Empty(t, reason)
	require.Equal(t, "550.54.15", driver)
	require.Len(t, gpus, 8)
	for i, gpu := range gpus {
		require.Equal(t, i, gpu.Index)
		require.Regexp(t, `^GPU-`, gpu.UUID)
		require.Equal(t, "Mock NVIDIA A100-SXM4-40GB", gpu.Name)
		require.Equal(t, int64(40*1024), gpu.MemoryTotalMiB)
		require.Equal(t, int64(i*1024), gpu.MemoryUsedMiB)
		require.Equal(t, 10*i, gpu.Utilisation)
		require.Equal(t, 40+i, gpu.TemperatureC)
		require.InDelta(t, 100+float64(i), gpu.PowerWatts, 0.001)
		require.True(t, gpu.Healthy)
	}
	require.NoError(t, runnerapi.CheckCapacity(runnerapi.Capacity{GPUs: gpus}))
}

func TestNoNVMLMeansNoGPUsAndAReason(t *testing.T) {
	t.Parallel()
	for ret, want := range map[nvml.Return]string{
		nvml.ERROR_LIBRARY_NOT_FOUND:       "libnvidia-ml.so.1) not found",
		nvml.ERROR_LIB_RM_VERSION_MISMATCH: "versions do not match",
		nvml.ERROR_DRIVER_NOT_LOADED:       "not loaded",
	} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		gpus, _, reason := capacity.NewGPUs(lib).Measure()
		require.Empty(t, gpus)
		require.Contains(t, reason, want)
	}
	// The real library on this machine: no driver, so no GPUs, and why.
	gpus, _, reason := capacity.NewGPUs(nvml.New()).Measure()
	if reason == "" {
		t.Skip("this host has a working NVIDIA driver")
	}
	require.Empty(t, gpus)
	require.NotEmpty(t, reason)
}

func TestXIDAndECCEventsMarkOneGPUUnhealthy(t *testing.T) {
	t.Parallel()
	s := dgx(t)
	events := make(chan nvml.EventData, 4)
	set := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			select {
			case ev := <-events:
				return ev, nvml.SUCCESS
			case <-time.After(10 * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	registered := make(chan uint64, 8)
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
			registered <- types
			return nvml.SUCCESS
		}
	}
	g := capacity.NewGPUs(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.WatchHealth(ctx, slog.New(slog.DiscardHandler))
	for range 8 {
		require.Equal(t, uint64(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError), <-registered, "single-bit ECC is not asked for")
	}

	// An application's fault (XID 13) leaves the GPU healthy; XID 79 (fell
	// off the bus) and a double-bit ECC error do not.
	events <- nvml.EventData{Device: s.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	events <- nvml.EventData{Device: s.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	events <- nvml.EventData{Device: s.Devices[5], EventType: nvml.EventTypeDoubleBitEccError}
	require.Eventually(t, func() bool {
		gpus, _, _ := g.Measure()
		return !gpus[3].Healthy && !gpus[5].Healthy
	}, 5*time.Second, 10*time.Millisecond)
	gpus, _, _ := g.Measure()
	for i, gpu := range gpus {
		switch i {
		case 3:
			require.Regexp(t, `^XID 79 at \S+ \(ECC: 0 uncorrected, 0 corrected\)$`, gpu.Health)
			require.Equal(t, 79, gpu.Fault.XID)
			require.Equal(t, gpu.UUID, gpu.Fault.UUID)
		case 5:
			require.Regexp(t, `^uncorrectable \(double-bit\) ECC error at \S+ \(ECC: 1 uncorrected, 4 corrected\)$`, gpu.Health)
			require.Equal(t, runnerapi.GPUFault{UUID: gpu.UUID, ECCUncorrected: 1, ECCCorrected: 4, ObservedAt: gpu.Fault.ObservedAt}, *gpu.Fault)
		default:
			require.True(t, gpu.Healthy, "GPU %d", i)
			require.Empty(t, gpu.Health)
		}
	}
}

// TestTheServersFaultsDecide: a fault the server holds keeps a GPU out of
// service in an agent that saw nothing (a restart), and clearing it there
// returns the GPU, including one this agent saw fail, but only once the
// server had listed it.
func TestTheServersFaultsDecide(t *testing.T) {
	t.Parallel()
	lib, xid := nvmltest.XIDServer()
	g := capacity.NewGPUs(lib)
	uuidOf := func(i int) string { u, _ := lib.Devices[i].GetUUID(); return u }
	healthy := func() []bool {
		gpus, _, _ := g.Measure()
		out := make([]bool, len(gpus))
		for i, gpu := range gpus {
			out[i] = gpu.Healthy
		}
		return out
	}
	held := runnerapi.GPUFault{UUID: uuidOf(2), XID: 48, ObservedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	g.Remember([]runnerapi.GPUFault{held})
	gpus, _, _ := g.Measure()
	require.False(t, gpus[2].Healthy)
	require.Equal(t, held.Evidence(), gpus[2].Health)
	require.Nil(t, gpus[2].Fault, "the server has its own evidence")
	g.Remember(nil)
	require.NotContains(t, healthy(), false, "cleared by an administrator")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.WatchHealth(ctx, slog.New(slog.DiscardHandler))
	xid <- nvml.EventData{Device: lib.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	require.Eventually(t, func() bool { return !healthy()[3] }, 5*time.Second, 10*time.Millisecond)
	g.Remember(nil)
	require.False(t, healthy()[3], "not recorded by the server yet: still reported")
	g.Remember([]runnerapi.GPUFault{{UUID: uuidOf(3), XID: 79, ObservedAt: time.Now()}})
	require.False(t, healthy()[3])
	g.Remember(nil)
	require.True(t, healthy()[3], "recorded, then cleared")
}

// fixture writes files under a fake root.
func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, body := range files {
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	return root
}

const meminfo = "MemTotal:       16384000 kB\nMemFree:         1000000 kB\nMemAvailable:    8192000 kB\n"

func TestHostHonoursCgroupLimits(t *testing.T) {
	t.Parallel()
	eight := func() int { return 8 }
	cases := map[string]struct {
		files   map[string]string
		cores   float64
		memMiB  int64
		limited []string
	}{
		"no cgroup file": {map[string]string{"proc/meminfo": meminfo}, 8, 16000, nil},
		"v2, no limits": {map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/runner.slice/agent.service\n",
			"sys/fs/cgroup/runner.slice/agent.service/cpu.max":    "max 100000\n",
			"sys/fs/cgroup/runner.slice/agent.service/memory.max": "max\n",
		}, 8, 16000, nil},
		"v2, limits on the parent bind the child": {map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/runner.slice/agent.service\n",
			"sys/fs/cgroup/runner.slice/cpu.max":                  "250000 100000\n",
			"sys/fs/cgroup/runner.slice/memory.max":               "4294967296\n",
			"sys/fs/cgroup/runner.slice/agent.service/cpu.max":    "max 100000\n",
			"sys/fs/cgroup/runner.slice/agent.service/memory.max": "8589934592\n",
		}, 2.5, 4096, []string{"cpu", "memory"}},
		"v1": {map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
			"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  "300000\n",
			"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes":  "2147483648\n",
		}, 3, 2048, []string{"cpu", "memory"}},
		"v1 unlimited": {map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "5:cpu,cpuacct:/\n4:memory:/\n",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  "-1\n",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":  "9223372036854771712\n",
		}, 8, 16000, nil},
	}
	for name, c := range cases {
		root := fixture(t, c.files)
		h, err := capacity.HostProbe{Root: root, WorkDir: root, NumCPU: eight}.Measure()
		require.NoError(t, err, name)
		require.Equal(t, c.cores, h.Cores, name)
		require.Equal(t, c.memMiB, h.MemoryMiB, name)
		require.Equal(t, c.limited, h.Limited, name)
		require.LessOrEqual(t, h.MemoryAvailableMiB, h.MemoryMiB, name)
		require.Positive(t, h.DiskFreeMiB, name)
	}
}

func TestThisHost(t *testing.T) {
	t.Parallel()
	h, err := capacity.HostProbe{WorkDir: t.TempDir()}.Measure()
	require.NoError(t, err)
	require.Positive(t, h.Cores)
	require.Positive(t, h.MemoryMiB)
	require.NoError(t, runnerapi.CheckCapacity(runnerapi.Capacity{Host: h}))
}

func TestDeclaredLabelsNeverPassForDetectedOnes(t *testing.T) {
	t.Parallel()
	require.Error(t, capacity.CheckDeclared(map[string]string{"runmesh.io/gpu.count": "64"}))
	require.NoError(t, capacity.CheckDeclared(map[string]string{"rack": "r12"}))

	c := &capacity.Collector{
		Host:     capacity.HostProbe{Root: fixture(t, map[string]string{"proc/meminfo": meminfo})},
		GPUs:     capacity.NewGPUs(dgx(t)),
		Declared: map[string]string{"rack": "r12", "runmesh.io/gpu.count": "64"},
	}
	got, err := c.Measure()
	require.NoError(t, err)
	labels := map[string]runnerapi.Label{}
	for _, l := range got.Labels {
		labels[l.Key] = l
	}
	require.Equal(t, runnerapi.Label{Key: "runmesh.io/gpu.count", Value: "8", Source: "detected"}, labels["runmesh.io/gpu.count"])
	require.Equal(t, runnerapi.Label{Key: "rack", Value: "r12", Source: "declared"}, labels["rack"])
	require.Equal(t, "Mock-NVIDIA-A100-SXM4-40GB", labels["runmesh.io/gpu.model"].Value, "a value a selector can name")
}
