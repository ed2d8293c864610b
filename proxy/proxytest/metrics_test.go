package proxytest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/proxy"
)

// namedPlane is a data plane that only has a mode name and can fail.
type namedPlane struct {
	name string
	fail atomic.Bool
}

func (n *namedPlane) Sync(_ context.Context, s *proxy.Snapshot, _ proxy.ChangeSet) (proxy.SyncResult, error) {
	if n.fail.Load() {
		return proxy.SyncResult{}, errors.New("kernel said no")
	}
	return proxy.SyncResult{Total: len(s.Services)}, nil
}
func (n *namedPlane) Cleanup(context.Context) error { return nil }
func (n *namedPlane) Name() string                  { return n.name }

func TestUpstreamMetricsListParses(t *testing.T) {
	ms, err := UpstreamMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 29 {
		t.Errorf("%d metrics in the recorded list, kube-proxy v1.37.2 has 29", len(ms))
	}
	if b := ms["kubeproxy_network_programming_duration_seconds"].Buckets; len(b) != 81 || b[0] != 0 || b[80] != 300 {
		t.Errorf("network programming buckets %v", b)
	}
}

// TestKubeProxyMetrics drives a proxy core per mode through the events
// every kube-proxy series reacts to, scrapes /metrics over HTTP and checks
// names, types, labels and buckets against kube-proxy v1.37.2's list, and
// the values against kube-proxy's meaning of each.
func TestKubeProxyMetrics(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables", "ipvs"} {
		t.Run(mode, func(t *testing.T) {
			plane := &namedPlane{name: mode}
			p, err := proxy.New(proxy.Config{NodeName: "n1"}, map[proxy.Family]proxy.DataPlane{proxy.IPv4: plane})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			tr := p.Tracker()
			tr.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
			local := v1.ServiceInternalTrafficPolicyLocal
			svc := Service("web", v1.ProtocolTCP, 80)
			svc.Namespace, svc.ResourceVersion, svc.Spec.ClusterIP = "default", "1", "10.96.0.10"
			svc.Spec.InternalTrafficPolicy = &local
			tr.SetService(svc)
			if err := p.SyncNow(ctx, false); err != nil {
				t.Fatal(err)
			}
			// An endpoint on another node only: iTP=Local traffic is dropped.
			// The change was triggered 300 ms ago, after the proxy started
			// (earlier trigger times are history, as for kube-proxy).
			time.Sleep(400 * time.Millisecond)
			sl := remoteSlice(svc, time.Now().Add(-300*time.Millisecond))
			tr.SetEndpointSlice(sl)
			plane.fail.Store(true)
			if err := p.SyncNow(ctx, false); err == nil {
				t.Fatal("failing plane synced")
			}
			plane.fail.Store(false)
			if err := p.SyncNow(ctx, false); err != nil {
				t.Fatal(err)
			}

			health := httptest.NewServer(p.HealthHandler())
			defer health.Close()
			code, body := get(t, health.URL+"/healthz")
			if code != http.StatusOK || !slices.Equal(keys(body), []string{"currentTime", "healthy", "lastUpdated", "nodeEligible", "status"}) ||
				body["nodeEligible"] != true || body["healthy"] != true {
				t.Errorf("/healthz %d %v", code, body)
			}
			if code, body := get(t, health.URL+"/livez"); code != http.StatusOK || slices.Contains(keys(body), "nodeEligible") {
				t.Errorf("/livez %d %v", code, body)
			}

			srv := httptest.NewServer(promhttp.HandlerFor(p.Metrics().Registry, promhttp.HandlerOpts{}))
			defer srv.Close()
			mfs := Scrape(t, srv.URL+"/metrics")
			CheckKubeProxyMetrics(t, p.Metrics().Registry, mfs, mode)

			v4 := map[string]string{"ip_family": "IPv4"}
			want := map[string]float64{
				"kubeproxy_sync_proxy_rules_service_changes_total":                   1,
				"kubeproxy_sync_proxy_rules_endpoint_changes_total":                  1,
				"kubeproxy_sync_proxy_rules_service_changes_pending":                 0,
				"kubeproxy_sync_proxy_rules_endpoint_changes_pending":                0,
				"kubeproxy_proxy_healthz_total":                                      1,
				"kubeproxy_proxy_livez_total":                                        1,
				"kubeproxy_sync_proxy_rules_no_local_endpoints_total":                1, // internal
				"kubeproxy_sync_proxy_rules_iptables_restore_failures_total":         0,
				"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total": 0,
				"kubeproxy_sync_proxy_rules_nftables_sync_failures_total":            0,
			}
			switch mode {
			case "iptables":
				want["kubeproxy_sync_proxy_rules_iptables_restore_failures_total"] = 1
				want["kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total"] = 1
			case "ipvs":
				want["kubeproxy_sync_proxy_rules_iptables_restore_failures_total"] = 1
			default:
				want["kubeproxy_sync_proxy_rules_nftables_sync_failures_total"] = 1
			}
			for name, w := range want {
				if got := sum(mfs[name], nil); got != w {
					t.Errorf("%s = %v, want %v", name, got, w)
				}
			}
			if got := sum(mfs["kubeproxy_sync_proxy_rules_no_local_endpoints_total"], map[string]string{"traffic_policy": "external"}); got != 0 {
				t.Errorf("no local endpoints, external = %v", got)
			}
			// One sample per annotated slice change, from the annotation
			// to the successful sync (the failed one does not count).
			h := series(mfs["kubeproxy_network_programming_duration_seconds"], v4)
			if h == nil || h.GetHistogram().GetSampleCount() != 1 || h.GetHistogram().GetSampleSum() < 0.3 {
				t.Errorf("network programming latency %v, want one sample ≥ 0.3s", h)
			}
			if s := series(mfs["kubeproxy_sync_proxy_rules_duration_seconds"], v4); s.GetHistogram().GetSampleCount() != 3 {
				t.Errorf("sync durations: %v, want 3 syncs (the failed one included)", s)
			}
			// kube-proxy's ipvs mode has no full/partial histograms.
			if s := series(mfs["kubeproxy_sync_partial_proxy_rules_duration_seconds"], v4); mode != "ipvs" && s.GetHistogram().GetSampleCount() != 1 {
				t.Errorf("partial sync durations: %v, want 1 (first sync full, sync after a failure full)", s)
			}
			last := series(mfs["kubeproxy_sync_proxy_rules_last_timestamp_seconds"], v4).GetGauge().GetValue()
			queued := series(mfs["kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"], v4).GetGauge().GetValue()
			if now := float64(time.Now().Unix()); last < now-60 || queued < now-60 || last < queued {
				t.Errorf("last sync %v, last queued %v", last, queued)
			}
		})
	}
}

// TestHealthzUnhealthy: kube-proxy's status codes when a change waits too
// long (both probes 503) and when the node is going away (/healthz 503,
// /livez 200).
func TestHealthzUnhealthy(t *testing.T) {
	p, err := proxy.New(proxy.Config{NodeName: "n1", MinSyncPeriod: time.Millisecond, SyncPeriod: 5 * time.Millisecond},
		map[proxy.Family]proxy.DataPlane{proxy.IPv4: &namedPlane{name: "nftables"}})
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	p.Tracker().SetNode(node)
	if err := p.SyncNow(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.HealthHandler())
	defer srv.Close()
	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("fresh /healthz %d", code)
	}
	tainted := node.DeepCopy()
	tainted.Spec.Taints = []v1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: v1.TaintEffectNoSchedule}}
	p.Tracker().SetNode(tainted)
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusServiceUnavailable || body["nodeEligible"] != false {
		t.Errorf("/healthz on a node being removed: %d %v", code, body)
	}
	if code, _ := get(t, srv.URL+"/livez"); code != http.StatusOK {
		t.Errorf("/livez on a node being removed: %d, want 200", code)
	}
	// A change nothing syncs, older than 10×MinSyncPeriod and 2×SyncPeriod.
	svc := Service("web", v1.ProtocolTCP, 80)
	svc.Spec.ClusterIP = "10.96.0.10"
	p.Tracker().SetService(svc)
	time.Sleep(100 * time.Millisecond)
	for _, path := range []string{"/healthz", "/livez"} {
		code, body := get(t, srv.URL+path)
		st, _ := body["status"].(map[string]any)
		v4, _ := st["IPv4"].(map[string]any)
		if code != http.StatusServiceUnavailable || body["healthy"] != false || v4["healthy"] != false {
			t.Errorf("%s with a stale change: %d %v", path, code, body)
		}
	}
}

func remoteSlice(svc *v1.Service, trigger time.Time) *discovery.EndpointSlice {
	name, port, proto, node, ready := "p", int32(80), v1.ProtocolTCP, "n2", true
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-1", ResourceVersion: "2",
			Labels:      map[string]string{discovery.LabelServiceName: svc.Name},
			Annotations: map[string]string{proxy.TriggerTimeAnnotation: trigger.Format(time.RFC3339Nano)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		Endpoints: []discovery.Endpoint{{Addresses: []string{"10.244.2.2"}, NodeName: &node,
			Conditions: discovery.EndpointConditions{Ready: &ready}}},
	}
}

func get(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s: %v: %s", url, err, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", url, ct)
	}
	return resp.StatusCode, body
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sum adds the counter or gauge values of mf's series matching match.
func sum(mf *dto.MetricFamily, match map[string]string) float64 {
	var s float64
	for _, m := range mf.GetMetric() {
		if match != nil && series(&dto.MetricFamily{Metric: []*dto.Metric{m}}, match) == nil {
			continue
		}
		s += metricNumber(m)
	}
	return s
}
