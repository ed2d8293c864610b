package proxytest

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/proxy"
)

// upstreamMetricsList is kube-proxy v1.37.2's metric list, recorded from
// its source (the file says how to read it).
//
//go:embed testdata/kube-proxy-v1.37.2-metrics.txt
var upstreamMetricsList string

// UpstreamMetric is one line of the recorded kube-proxy metric list.
type UpstreamMetric struct {
	Name, Type string
	Labels     []string // sorted
	Buckets    []float64
	Modes      []string // "all" or mode names
	NotServed  string   // why nodenet does not serve it ("" = served)
}

// InMode reports whether kube-proxy registers m in mode.
func (m UpstreamMetric) InMode(mode string) bool {
	return slices.Contains(m.Modes, "all") || slices.Contains(m.Modes, mode)
}

// UpstreamMetrics parses the recorded list.
func UpstreamMetrics() (map[string]UpstreamMetric, error) {
	out := map[string]UpstreamMetric{}
	for i, line := range strings.Split(upstreamMetricsList, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		spec, notServed, _ := strings.Cut(line, " not-served: ")
		f := strings.Fields(spec)
		if len(f) != 5 {
			return nil, fmt.Errorf("line %d: want 5 fields: %q", i+1, line)
		}
		m := UpstreamMetric{Name: f[0], Type: f[1], Modes: strings.Split(f[4], ","), NotServed: notServed}
		if f[2] != "-" {
			m.Labels = strings.Split(f[2], ",")
		}
		b, err := parseBuckets(f[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		m.Buckets = b
		out[m.Name] = m
	}
	return out, nil
}

func parseBuckets(s string) ([]float64, error) {
	switch {
	case s == "-":
		return nil, nil
	case s == "programming":
		// 0, 0.25, 0.5, 1..59, 60..115 by 5, 120..300 by 30.
		out := []float64{0}
		out = append(out, prometheus.LinearBuckets(0.25, 0.25, 2)...)
		out = append(out, prometheus.LinearBuckets(1, 1, 59)...)
		out = append(out, prometheus.LinearBuckets(60, 5, 12)...)
		return append(out, prometheus.LinearBuckets(120, 30, 7)...), nil
	case strings.HasPrefix(s, "exp:"):
		p := strings.Split(strings.TrimPrefix(s, "exp:"), ",")
		if len(p) != 3 {
			return nil, fmt.Errorf("buckets %q", s)
		}
		start, err1 := strconv.ParseFloat(p[0], 64)
		factor, err2 := strconv.ParseFloat(p[1], 64)
		n, err3 := strconv.Atoi(p[2])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("buckets %q", s)
		}
		return prometheus.ExponentialBuckets(start, factor, n), nil
	}
	return nil, fmt.Errorf("buckets %q", s)
}

// Scrape fetches and parses a Prometheus text endpoint.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return mfs
}

// descRE pulls the name and variable labels out of a prometheus.Desc's
// String(), the only way to list a registry's empty vectors (a scrape
// shows a vector only once it has a child).
var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// registeredNames lists the metric names and label names reg describes.
func registeredNames(reg *prometheus.Registry) map[string][]string {
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	out := map[string][]string{}
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// CheckKubeProxyMetrics checks what a proxy in mode serves against the
// recorded kube-proxy list: every kube-proxy metric kube-proxy registers
// in that mode is registered (unless recorded as not served) with the same
// labels, nothing else carries the kubeproxy_ prefix, and every family of
// the scrape mfs has kube-proxy's type, label names and buckets.
func CheckKubeProxyMetrics(t testing.TB, reg *prometheus.Registry, mfs map[string]*dto.MetricFamily, mode string) {
	t.Helper()
	want, err := UpstreamMetrics()
	if err != nil {
		t.Fatal(err)
	}
	got := registeredNames(reg)
	for name, m := range want {
		labels, ok := got[name]
		switch {
		case !m.InMode(mode) || m.NotServed != "":
			if ok {
				t.Errorf("%s registered in mode %s; kube-proxy has it only in %v (or nodenet records it not served)", name, mode, m.Modes)
			}
		case !ok:
			t.Errorf("%s (kube-proxy, mode %s) not registered", name, mode)
		case !slices.Equal(labels, m.Labels):
			t.Errorf("%s labels %v, kube-proxy has %v", name, labels, m.Labels)
		}
	}
	for name := range got {
		if _, ok := want[name]; strings.HasPrefix(name, "kubeproxy_") && !ok {
			t.Errorf("%s: kube-proxy has no such metric", name)
		}
	}
	for name, mf := range mfs {
		m, ok := want[name]
		if !ok {
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != m.Type {
			t.Errorf("%s: type %s, kube-proxy's is %s", name, typ, m.Type)
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, lp := range s.GetLabel() {
				labels = append(labels, lp.GetName())
			}
			slices.Sort(labels)
			if !slices.Equal(labels, m.Labels) {
				t.Errorf("%s: series labels %v, kube-proxy's are %v", name, labels, m.Labels)
			}
			if h := s.GetHistogram(); h != nil {
				var bounds []float64
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) { // implicit in every histogram
						bounds = append(bounds, b.GetUpperBound())
					}
				}
				if !slices.Equal(bounds, m.Buckets) {
					t.Errorf("%s: buckets %v, kube-proxy's are %v", name, bounds, m.Buckets)
				}
			}
		}
	}
}

// checkRunningMetrics scrapes the running proxy's /metrics and /healthz
// over HTTP: kube-proxy's names, types, labels and buckets for the proxy's
// mode, and a network programming sample for an EndpointSlice change made
// through the API with its trigger-time annotation.
func checkRunningMetrics(t *testing.T, e *Env, p *proxy.Proxy) {
	srv := httptest.NewServer(promhttp.HandlerFor(p.Metrics().Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	health := httptest.NewServer(p.HealthHandler())
	defer health.Close()

	programmed := func() uint64 {
		var n uint64
		for _, m := range Scrape(t, srv.URL+"/metrics")["kubeproxy_network_programming_duration_seconds"].GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
		return n
	}
	before := programmed()
	svc := e.CreateService(t, Service("metrics", v1.ProtocolTCP, TCPPort))
	e.SetEndpoints(t, svc, TCPPort, Pod1)
	ctx := context.Background()
	sl, err := e.Kube.DiscoveryV1().EndpointSlices(svc.Namespace).Get(ctx, svc.Name+"-ipv4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl.Annotations = map[string]string{proxy.TriggerTimeAnnotation: time.Now().Format(time.RFC3339Nano)}
	sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{Pod2IP}, NodeName: ptr(Pod2.Node),
		Conditions: discovery.EndpointConditions{Ready: ptr(true)}})
	if _, err := e.Kube.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, wait, "network programming sample for the annotated change", func() error {
		if n := programmed(); n <= before {
			return fmt.Errorf("%d samples, had %d", n, before)
		}
		return nil
	})
	resp, err := http.Get(health.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz of the running proxy: %s", resp.Status)
	}
	mfs := Scrape(t, srv.URL+"/metrics")
	CheckKubeProxyMetrics(t, p.Metrics().Registry, mfs, p.Mode())
	upstream, err := UpstreamMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_sync_full_proxy_rules_duration_seconds",
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds", "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
		"kubeproxy_sync_proxy_rules_endpoint_changes_total", "kubeproxy_sync_proxy_rules_service_changes_total",
		"kubeproxy_sync_proxy_rules_no_local_endpoints_total", "kubeproxy_proxy_healthz_total", "nodenet_proxy_rules_programmed"} {
		if m, ok := upstream[name]; ok && !m.InMode(p.Mode()) {
			continue // kube-proxy does not serve it in this mode either
		}
		if len(mfs[name].GetMetric()) == 0 {
			t.Errorf("%s not served by the running proxy", name)
		}
	}
	for _, f := range []string{"IPv4", "IPv6"} {
		if s := series(mfs["kubeproxy_sync_proxy_rules_last_timestamp_seconds"], map[string]string{"ip_family": f}); s == nil {
			t.Errorf("no last sync timestamp for %s", f)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// series returns the series of mf whose labels include match.
func series(mf *dto.MetricFamily, match map[string]string) *dto.Metric {
	for _, m := range mf.GetMetric() {
		ok := true
		for k, v := range match {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == k && lp.GetValue() == v
			}
			ok = ok && found
		}
		if ok {
			return m
		}
	}
	return nil
}
