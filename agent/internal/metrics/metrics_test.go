package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/runnerapi"
)

// A GPU's series carry the labels of the job holding it, and drop them once
// no job does.
func TestGPUSeriesNameTheJobHoldingEachGPU(t *testing.T) {
	t.Parallel()
	a := New()
	c := runnerapi.Capacity{Host: runnerapi.HostCapacity{Hostname: "h"}}
	for i := range 8 {
		c.GPUs = append(c.GPUs, runnerapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "Mock", MemoryUsedMiB: 1})
	}
	job := Holder{Organisation: "acme", Pool: "gpu", Job: "j1", Lease: "j1/1"}
	a.SetGPUs(c, map[string]Holder{"GPU-2": job, "GPU-5": job})
	got := scrape(t, a)
	labelled := regexp.MustCompile(`(?m)^DCGM_FI_DEV_FB_USED\{.*UUID="(GPU-\d)".*job="j1",lease="j1/1",.*organisation="acme",pool="gpu"\} 1$`).FindAllStringSubmatch(got, -1)
	if len(labelled) != 2 || labelled[0][1] != "GPU-2" || labelled[1][1] != "GPU-5" {
		t.Fatalf("the job's labels are on %v, want GPU-2 and GPU-5 alone:\n%s", labelled, got)
	}
	if n := strings.Count(got, "DCGM_FI_DEV_FB_USED{"); n != 8 {
		t.Fatalf("%d series, want one a GPU", n)
	}

	a.SetGPUs(c, nil)
	if got := scrape(t, a); strings.Contains(got, `job="j1"`) {
		t.Fatalf("the labels outlived the job:\n%s", got)
	}
}

func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}
