// Package metrics is the agent's Prometheus endpoint. GPU metrics carry
// dcgm-exporter's names and labels, so dashboards and alerts written for
// dcgm-exporter work unchanged; the organisation, pool, job and lease labels
// name the job holding the GPU while one runs on it.
package metrics

import (
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runmesh/runmesh/runnerapi"
)

var gpuLabels = []string{"gpu", "UUID", "modelName", "Hostname", "organisation", "pool", "job", "lease"}

// Agent holds the agent's metrics.
type Agent struct {
	reg        *prometheus.Registry
	util       *prometheus.GaugeVec
	fbUsed     *prometheus.GaugeVec
	fbFree     *prometheus.GaugeVec
	temp       *prometheus.GaugeVec
	power      *prometheus.GaugeVec
	xid        *prometheus.GaugeVec
	heartbeats *prometheus.CounterVec
	certExpiry prometheus.Gauge
}

// Holder names the job holding a GPU.
type Holder struct{ Organisation, Pool, Job, Lease string }

// New registers the agent's metrics.
func New() *Agent {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, gpuLabels)
	}
	a := &Agent{
		reg:    prometheus.NewRegistry(),
		util:   gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
		fbUsed: gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
		fbFree: gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
		temp:   gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
		power:  gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
		xid:    gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runmesh_agent_heartbeats_total", Help: "Heartbeats sent, by result.",
		}, []string{"result"}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runmesh_agent_certificate_expiry_timestamp_seconds", Help: "When the runner's current certificate expires.",
		}),
	}
	a.reg.MustRegister(a.util, a.fbUsed, a.fbFree, a.temp, a.power, a.xid, a.heartbeats, a.certExpiry,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return a
}

var xidNumber = regexp.MustCompile(`^XID (\d+)`)

// SetGPUs replaces the GPU series with c's GPUs. holders maps a GPU UUID
// to the job holding it.
func (a *Agent) SetGPUs(c runnerapi.Capacity, holders map[string]Holder) {
	for _, v := range []*prometheus.GaugeVec{a.util, a.fbUsed, a.fbFree, a.temp, a.power, a.xid} {
		v.Reset()
	}
	for _, g := range c.GPUs {
		h := holders[g.UUID]
		l := prometheus.Labels{
			"gpu": strconv.Itoa(g.Index), "UUID": g.UUID, "modelName": g.Name, "Hostname": c.Host.Hostname,
			"organisation": h.Organisation, "pool": h.Pool, "job": h.Job, "lease": h.Lease,
		}
		a.util.With(l).Set(float64(g.Utilisation))
		a.fbUsed.With(l).Set(float64(g.MemoryUsedMiB))
		a.fbFree.With(l).Set(float64(g.MemoryFreeMiB))
		a.temp.With(l).Set(float64(g.TemperatureC))
		a.power.With(l).Set(g.PowerWatts)
		xid := 0.0
		if m := xidNumber.FindStringSubmatch(g.Health); m != nil {
			xid, _ = strconv.ParseFloat(m[1], 64)
		}
		a.xid.With(l).Set(xid)
	}
}

// Heartbeat counts a heartbeat's result ("ok" or "error").
func (a *Agent) Heartbeat(result string) { a.heartbeats.WithLabelValues(result).Inc() }

// CertificateExpiry records the current certificate's expiry.
func (a *Agent) CertificateExpiry(t time.Time) { a.certExpiry.Set(float64(t.Unix())) }

// Handler serves /metrics.
func (a *Agent) Handler() http.Handler {
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})
}
