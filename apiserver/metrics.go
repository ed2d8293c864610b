package apiserver

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are per server (not global) so tests can run several servers in
// one process.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watchers *prometheus.GaugeVec
	etcd     *prometheus.HistogramVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total", Help: "API requests by verb, resource and HTTP code.",
		}, []string{"verb", "resource", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "apiserver_request_duration_seconds", Help: "API request latency (watches excluded) by verb and resource.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"verb", "resource"}),
		watchers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_registered_watchers", Help: "Open watches by resource.",
		}, []string{"resource"}),
		etcd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "etcd_request_duration_seconds", Help: "etcd call latency by operation.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"operation"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.watchers, m.etcd,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeEtcd(op string, seconds float64) {
	m.etcd.WithLabelValues(op).Observe(seconds)
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// requestInfo is filled in by the resource handler so the access log and
// metrics can name the verb and resource.
type requestInfo struct {
	verb, resource string
}

type infoKey struct{}

func setRequestInfo(r *http.Request, req *apiRequest) {
	info, _ := r.Context().Value(infoKey{}).(*requestInfo)
	if info == nil {
		return
	}
	info.resource = req.res.plural
	if req.sub != "" {
		info.resource += "/" + req.sub
	}
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		switch {
		case req.watchPath || q.Get("watch") == "true" || q.Get("watch") == "1":
			info.verb = "WATCH"
		case req.name == "":
			info.verb = "LIST"
		default:
			info.verb = "GET"
		}
	case http.MethodPost:
		info.verb = "CREATE"
	case http.MethodPut:
		info.verb = "UPDATE"
	case http.MethodPatch:
		info.verb = "PATCH"
	case http.MethodDelete:
		info.verb = "DELETE"
		if req.name == "" {
			info.verb = "DELETECOLLECTION"
		}
	}
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// instrument logs every request (mutations at Info, reads at Debug) and
// records request metrics.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{verb: r.Method, resource: ""}
		rec := &statusRecorder{ResponseWriter: w}
		ctx := r.Context()
		next.ServeHTTP(rec, r.WithContext(contextWithInfo(ctx, info)))
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		elapsed := time.Since(start)
		if info.resource != "" {
			s.metrics.requests.WithLabelValues(info.verb, info.resource, strconv.Itoa(code)).Inc()
			if info.verb != "WATCH" {
				s.metrics.latency.WithLabelValues(info.verb, info.resource).Observe(elapsed.Seconds())
			}
		}
		level := slog.LevelDebug
		switch {
		case code >= 500:
			level = slog.LevelError
		case r.Method != http.MethodGet:
			level = slog.LevelInfo
		}
		s.log.Log(ctx, level, "request", "method", r.Method, "path", r.URL.Path, "verb", info.verb, "code", code, "latency", elapsed)
	})
}
