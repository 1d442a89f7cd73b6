package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/k8sclient"
)

// metrics are the daemon's Prometheus metrics (docs/hotplug.md, "Metrics").
// They live in a registry of the daemon's own, so a test's daemon and the
// process's default registry never mix.
type metrics struct {
	reg        *prometheus.Registry
	calls      *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	inFlight   prometheus.Gauge
	api        *prometheus.CounterVec
	hotplug    *prometheus.CounterVec
	hotplugDur prometheus.Histogram
	hotplugOn  prometheus.Gauge
	handled    *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "manifold_daemon_calls_total",
			Help: "CNI calls served over the socket, by verb and result (ok or error).",
		}, []string{"verb", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "manifold_daemon_call_duration_seconds",
			Help:    "Time from a call's request to its answer, by verb.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 90},
		}, []string{"verb"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "manifold_daemon_calls_in_flight",
			Help: "CNI calls being served now.",
		}),
		api: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "manifold_daemon_api_requests_total",
			Help: "Requests to the API server, by kind (pod_get, nad_get, pod_status_patch, event_create, pod_list, pod_watch, resourceclaim_get, resourceslice_list, resourceclaim_status_apply) and result (ok or error).",
		}, []string{"kind", "result"}),
		hotplug: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "manifold_daemon_hotplug_operations_total",
			Help: "Hot-plug operations, by operation (attach, detach, reconcile) and result (ok, error, refused).",
		}, []string{"operation", "result"}),
		hotplugDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "manifold_daemon_hotplug_duration_seconds",
			Help:    "Time to bring one pod's attachments to its annotation, for reconciles that changed something.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 90},
		}),
		hotplugOn: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "manifold_daemon_hotplug_running",
			Help: "1 while the hot-plug's pod watch runs, 0 while it is off or not set up yet.",
		}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "manifold_daemon_hotplug_pods_handled_total",
			Help: "Pods the hot-plug's workers took from their queue and were done with, by result: changed (an attachment was added or removed), unchanged (nothing to change: applied already, no container of the pod on this node, or the pod is gone), error (tried again after a backoff).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.calls, m.latency, m.inFlight, m.api, m.hotplug, m.hotplugDur, m.hotplugOn, m.handled,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observeCall counts one call served over the socket.
func (m *metrics) observeCall(verb string, ok bool, took time.Duration) {
	if m == nil {
		return
	}
	verb = verbLabel(verb)
	m.calls.WithLabelValues(verb, result(ok)).Inc()
	m.latency.WithLabelValues(verb).Observe(took.Seconds())
}

// verbLabel is the label of a call's CNI_COMMAND: the verbs CNI defines, or
// "other". The caller chooses the value, and each label value is a series
// the daemon keeps for good.
func verbLabel(cmd string) string {
	switch cmd {
	case "ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION":
		return cmd
	}
	return "other"
}

// apiRequest counts one request to the API server.
func (m *metrics) apiRequest(kind string, err error) {
	if m != nil {
		m.api.WithLabelValues(kind, result(err == nil)).Inc()
	}
}

func result(ok bool) string {
	if ok {
		return "ok"
	}
	return "error"
}

// countedAPI is a call's API client, counting its requests by kind.
type countedAPI struct {
	flow.API
	m *metrics
}

func (c *countedAPI) WaitForPod(ctx context.Context, namespace, name, uid string, wait time.Duration) (*k8sclient.Pod, error) {
	p, err := c.API.WaitForPod(ctx, namespace, name, uid, wait)
	c.m.apiRequest("pod_get", err)
	return p, err
}

func (c *countedAPI) GetNAD(ctx context.Context, namespace, name string) (*k8sclient.NetworkAttachmentDefinition, error) {
	n, err := c.API.GetNAD(ctx, namespace, name)
	if errors.Is(err, k8sclient.ErrNotFound) {
		c.m.apiRequest("nad_get", nil) // an answer, not a failure to get one
	} else {
		c.m.apiRequest("nad_get", err)
	}
	return n, err
}

func (c *countedAPI) PatchPodAnnotation(ctx context.Context, namespace, name, uid, key, value string) error {
	err := c.API.PatchPodAnnotation(ctx, namespace, name, uid, key, value)
	c.m.apiRequest("pod_status_patch", err)
	return err
}

func (c *countedAPI) Event(ctx context.Context, pod *k8sclient.Pod, eventType, reason, message, host string, now time.Time) error {
	err := c.API.Event(ctx, pod, eventType, reason, message, host, now)
	c.m.apiRequest("event_create", err)
	return err
}

func (c *countedAPI) GetResourceClaim(ctx context.Context, namespace, name string) (*k8sclient.ResourceClaim, error) {
	rc, err := c.API.GetResourceClaim(ctx, namespace, name)
	c.m.apiRequest("resourceclaim_get", err)
	return rc, err
}

func (c *countedAPI) ListResourceSlices(ctx context.Context, driver, nodeName string) ([]k8sclient.ResourceSlice, error) {
	s, err := c.API.ListResourceSlices(ctx, driver, nodeName)
	c.m.apiRequest("resourceslice_list", err)
	return s, err
}

func (c *countedAPI) ApplyClaimDeviceStatus(ctx context.Context, namespace, name, uid, fieldManager string, devices []k8sclient.DeviceStatus, force bool) error {
	err := c.API.ApplyClaimDeviceStatus(ctx, namespace, name, uid, fieldManager, devices, force)
	c.m.apiRequest("resourceclaim_status_apply", err)
	return err
}

// Sources and Unauthorized pass through, for the API cache.
func (c *countedAPI) Sources() []string {
	if s, ok := c.API.(sourced); ok {
		return s.Sources()
	}
	return nil
}

func (c *countedAPI) Unauthorized() bool {
	r, ok := c.API.(refused)
	return ok && r.Unauthorized()
}

func (c *countedAPI) CloseIdleConnections() {
	if i, ok := c.API.(interface{ CloseIdleConnections() }); ok {
		i.CloseIdleConnections()
	}
}

// The metrics listener's bounds: a client that sends its headers slowly, a
// request that never ends, an answer that is not read, or a kept-alive
// connection left idle, is closed after these. Variables for tests.
var (
	metricsReadHeaderTimeout = 5 * time.Second
	metricsReadTimeout       = 10 * time.Second
	metricsWriteTimeout      = 30 * time.Second
	metricsIdleTimeout       = time.Minute
)

// metricsMaxHeaderBytes bounds a request's headers (Go's default is 1 MiB).
const metricsMaxHeaderBytes = 16 << 10

// serveMetrics serves /metrics, /healthz and /livez on addr until ctx is
// done. /healthz answers 200 while healthy() holds, else 503 with the reason;
// /livez likewise with live(), the liveness probe's check. The endpoint is
// unauthenticated (docs/security.md): an address other than a loopback one is
// served with a warning.
//
// An address in use is taken as the daemon before this one, still finishing
// its calls during a rolling update (it gave up the socket, not yet this
// port): it is tried again every second, in the background, and the returned
// address is nil meanwhile. Any other error is returned.
func serveMetrics(ctx context.Context, log *slog.Logger, addr string, m *metrics, healthy, live func() error) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		log.Info("the metrics address is in use, by the daemon before this one if a rollout is under way; trying again every second", "address", addr)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				ln, err := net.Listen("tcp", addr)
				if errors.Is(err, syscall.EADDRINUSE) {
					continue
				}
				if err != nil {
					log.Error("metrics and health not served", "address", addr, "error", err)
					return
				}
				log.Info("metrics and health served", "address", ln.Addr().String())
				serveHTTP(ctx, log, ln, m, healthy, live)
				return
			}
		}()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	serveHTTP(ctx, log, ln, m, healthy, live)
	return ln.Addr(), nil
}

// serveHTTP serves the metrics and health endpoints on ln until ctx is done.
func serveHTTP(ctx context.Context, log *slog.Logger, ln net.Listener, m *metrics, healthy, live func() error) {
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		log.Warn("metrics and health are served on an address that is not loopback; the endpoint has no authentication (docs/security.md)", "address", a.String())
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	for path, check := range map[string]func() error{"/healthz": healthy, "/livez": live} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout, ReadTimeout: metricsReadTimeout,
		WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout, MaxHeaderBytes: metricsMaxHeaderBytes}
	var stopped atomic.Bool
	go func() {
		<-ctx.Done()
		stopped.Store(true)
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !stopped.Load() && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
}
