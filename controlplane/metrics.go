package controlplane

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// metrics is the server's Prometheus registry. A registry of our own (not
// the global one) keeps tests that start several servers independent.
type metrics struct {
	reg              *prometheus.Registry
	requests         *prometheus.HistogramVec
	inFlight         *prometheus.GaugeVec
	heartbeatLatency prometheus.Histogram
	heartbeatBatch   prometheus.Histogram
	jobEvents        *prometheus.CounterVec
}

func newMetrics(version string, s *store.Store, defaultLeaseSeconds int, log *slog.Logger) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runmesh_http_request_duration_seconds",
			Help:    "HTTP request latency by listener, route and status code.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"listener", "route", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "runmesh_http_requests_in_flight",
			Help: "HTTP requests being served, by listener: on the runner listener, mostly runners long-polling for work or for their approval.",
		}, []string{"listener"}),
		heartbeatLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runmesh_heartbeat_duration_seconds",
			Help:    "Time from a heartbeat's arrival to its answer, with the report durable in PostgreSQL.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		heartbeatBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runmesh_heartbeat_batch_runners",
			Help:    "Heartbeats written per statement.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		// Counted by the replica that wrote them: sum over replicas.
		jobEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runmesh_job_events_total",
			Help: "Job events this server wrote, by type: LEASED is a lease granted; LEASE_EXPIRED one that ran out with tries " +
				"left (on the last try the job is FAILED instead); REQUEUED a job its runner gave back (a host fault) or never " +
				"received; SUCCEEDED, FAILED, CANCELLED and EXPIRED are the outcomes.",
		}, []string{"type"}),
	}
	for _, typ := range store.JobEventTypes { // each exported from the start, at zero
		m.jobEvents.WithLabelValues(typ)
	}
	s.OnJobEvents(func(typ string, n int) { m.jobEvents.WithLabelValues(typ).Add(float64(n)) })
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "runmesh_build_info",
		Help:        "Always 1; the labels say which runmesh-server is running.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests,
		m.inFlight,
		m.heartbeatLatency,
		m.heartbeatBatch,
		m.jobEvents,
		build,
		&fleetCollector{store: s, defaultLeaseSeconds: defaultLeaseSeconds, log: log},
	)
	return m
}

// fleetCollector reads the fleet's gauges from PostgreSQL at each scrape,
// so every replica reports the same truth.
type fleetCollector struct {
	store               *store.Store
	defaultLeaseSeconds int
	log                 *slog.Logger
}

var (
	jobsDesc     = prometheus.NewDesc("runmesh_jobs", "Unfinished jobs by organisation, pool and state (QUEUED, BLOCKED, LEASED, RUNNING); in a platform pool, by the organisation that submitted them.", []string{"organisation", "pool", "state"}, nil)
	heldGPUsDesc = prometheus.NewDesc("runmesh_pool_gpus_held", "GPUs under an administrator's hold, by pool.", []string{"organisation", "pool"}, nil)
	runnersDesc  = prometheus.NewDesc("runmesh_runners", "Runners by status and whether they are online (heartbeated within their pool's lease).", []string{"status", "online"}, nil)
	gpusDesc     = prometheus.NewDesc("runmesh_gpus", "GPUs reported by runners, by runner status and GPU health.", []string{"status", "health"}, nil)
	scrapeDesc   = prometheus.NewDesc("runmesh_fleet_scrape_error", "1 when the fleet gauges could not be read from the database.", nil, nil)
)

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- heldGPUsDesc
	ch <- runnersDesc
	ch <- gpusDesc
	ch <- scrapeDesc
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.store.FleetCounts(ctx, c.defaultLeaseSeconds)
	var pools []store.PoolJobs
	if err == nil {
		pools, err = c.store.PoolJobCounts(ctx)
	}
	if err != nil {
		c.log.Error("reading the fleet and queue gauges for /metrics", "err", err)
		ch <- prometheus.MustNewConstMetric(scrapeDesc, prometheus.GaugeValue, 1)
		return
	}
	for _, p := range pools {
		for st, n := range p.Jobs {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), p.Organisation, p.Pool, string(st))
		}
		if !p.Submitted {
			ch <- prometheus.MustNewConstMetric(heldGPUsDesc, prometheus.GaugeValue, float64(p.HeldGPUs), p.Organisation, p.Pool)
		}
	}
	ch <- prometheus.MustNewConstMetric(scrapeDesc, prometheus.GaugeValue, 0)
	type key struct{ status, online string }
	runners := map[key]float64{}
	healthy, unhealthy := map[string]float64{}, map[string]float64{}
	for _, st := range []record.RunnerStatus{record.RunnerPending, record.RunnerApproved, record.RunnerRejected, record.RunnerRevoked} {
		for _, on := range []string{"true", "false"} {
			runners[key{string(st), on}] = 0
		}
		healthy[string(st)], unhealthy[string(st)] = 0, 0
	}
	for _, f := range counts {
		runners[key{string(f.Status), strconv.FormatBool(f.Online)}] += float64(f.Runners)
		healthy[string(f.Status)] += float64(f.GPUsHealthy)
		unhealthy[string(f.Status)] += float64(f.GPUs - f.GPUsHealthy)
	}
	for k, v := range runners {
		ch <- prometheus.MustNewConstMetric(runnersDesc, prometheus.GaugeValue, v, k.status, k.online)
	}
	for st := range healthy {
		ch <- prometheus.MustNewConstMetric(gpusDesc, prometheus.GaugeValue, healthy[st], st, "healthy")
		ch <- prometheus.MustNewConstMetric(gpusDesc, prometheus.GaugeValue, unhealthy[st], st, "unhealthy")
	}
}

// certificateExpiry exports when a certificate of the server's expires;
// notAfter is read at each scrape (zero: none yet).
func (m *metrics) certificateExpiry(certificate string, notAfter func() time.Time) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "runmesh_certificate_expiry_timestamp_seconds",
		Help:        "When a certificate of this server expires (Unix time): the runner listener's own, renewed at two thirds of its life, and the CA's root and intermediate (which signs runner certificates).",
		ConstLabels: prometheus.Labels{"certificate": certificate},
	}, func() float64 {
		t := notAfter()
		if t.IsZero() {
			return 0
		}
		return float64(t.Unix())
	}))
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// instrument records the latency of every request. An empty route means
// "the pattern the ServeMux inside next matched" (a bounded set, unlike
// paths, which carry ids).
func (m *metrics) instrument(listener, route string, next http.Handler) http.Handler {
	inFlight := m.inFlight.WithLabelValues(listener)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Inc()
		defer inFlight.Dec()
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		label := route
		if label == "" {
			label = r.Pattern
		}
		if label == "" || label == "/" || label == "/v1/" {
			label = "other"
		}
		m.requests.WithLabelValues(listener, label, strconv.Itoa(sw.status)).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the real writer (websockets
// need its Hijacker, streaming its Flusher).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
