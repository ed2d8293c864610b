package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// recordingPlane is a DataPlane that remembers what it was asked to do.
type recordingPlane struct {
	mu      sync.Mutex
	syncs   []ChangeSet
	snaps   []*Snapshot
	failing error
}

func (r *recordingPlane) Sync(_ context.Context, s *Snapshot, c ChangeSet) (SyncResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs = append(r.syncs, c)
	r.snaps = append(r.snaps, s)
	if r.failing != nil {
		return SyncResult{}, r.failing
	}
	return SyncResult{Written: len(s.Services), Total: len(s.Services)}, nil
}
func (r *recordingPlane) Cleanup(context.Context) error { return nil }
func (r *recordingPlane) Name() string                  { return "recording" }

func (r *recordingPlane) last() (*Snapshot, ChangeSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snaps[len(r.snaps)-1], r.syncs[len(r.syncs)-1]
}

var rvCounter int

func service(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	rvCounter++
	if len(ports) == 0 {
		ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt(8080)}}
	}
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: fmt.Sprint(rvCounter)},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, Ports: ports},
	}
}

func slice(ns, svc, name string, port int32, addrs ...string) *discovery.EndpointSlice {
	rvCounter++
	pn, proto := "http", v1.ProtocolTCP
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: fmt.Sprint(rvCounter),
			Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &pn, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		node := "n1"
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{a}, NodeName: &node})
	}
	return sl
}

func newTestProxy(t *testing.T, cfg Config) (*Proxy, *recordingPlane) {
	t.Helper()
	rp := &recordingPlane{}
	if cfg.NodeName == "" {
		cfg.NodeName = "n1"
	}
	p, err := New(cfg, map[Family]DataPlane{IPv4: rp})
	if err != nil {
		t.Fatal(err)
	}
	return p, rp
}

func TestChangeTrackingAndChangeSets(t *testing.T) {
	ctx := context.Background()
	p, rp := newTestProxy(t, Config{})
	tr := p.Tracker()
	tr.SetService(service("a", "web", "10.96.0.1"))
	tr.SetService(service("a", "db", "10.96.0.2"))
	tr.SetEndpointSlice(slice("a", "web", "web-1", 8080, "10.244.0.1", "10.244.0.2"))
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	snap, cs := rp.last()
	if !cs.Full {
		t.Error("first sync is not full")
	}
	web := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "a", Name: "web"}, Port: "http", Protocol: TCP}
	db := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "a", Name: "db"}, Port: "http", Protocol: TCP}
	if len(snap.Services) != 2 || len(snap.Services[web].Selected.Cluster) != 2 || len(snap.Services[db].Selected.Cluster) != 0 {
		t.Fatalf("snapshot: %+v", snap.Services)
	}
	if got := snap.Services[web].Endpoints[0]; got.Port != 8080 || !got.Ready || !got.IsLocal {
		t.Errorf("endpoint = %+v", got)
	}
	dbBefore, webBefore := snap.Services[db], snap.Services[web]

	// One slice change: a partial sync naming only that service; the other
	// service's port is shared untouched.
	tr.SetEndpointSlice(slice("a", "web", "web-1", 8080, "10.244.0.1"))
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	snap2, cs := rp.last()
	if cs.Full || len(cs.Services) != 1 || !cs.Has(web.NamespacedName) || cs.Has(db.NamespacedName) {
		t.Errorf("change set = %+v", cs)
	}
	if _, ok := cs.Ports[web]; !ok || len(cs.Ports) != 1 {
		t.Errorf("change set ports = %v, want just %v", cs.Ports, web)
	}
	if snap2.Services[db] != dbBefore {
		t.Error("unchanged service was rebuilt")
	}
	if n := len(snap2.Services[web].Selected.Cluster); n != 1 {
		t.Errorf("web has %d endpoints, want 1", n)
	}
	// Snapshots share the live map, but a port is never changed in place:
	// the one the last sync programmed stays as it was (staleFlowsOf
	// compares against it).
	if n := len(webBefore.Selected.Cluster); n != 2 {
		t.Error("the previous sync's service port was mutated")
	}

	// Deletion: the name is in the change set and gone from the snapshot.
	tr.DeleteService("a", "db")
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	snap3, cs := rp.last()
	if !cs.Has(db.NamespacedName) || snap3.Services[db] != nil {
		t.Errorf("delete: change set %+v, snapshot has db: %v", cs, snap3.Services[db] != nil)
	}
	if _, ok := cs.Ports[db]; !ok {
		t.Errorf("delete: change set ports %v lack the deleted %v", cs.Ports, db)
	}

	// Informer resync with the same resourceVersion is not a change.
	svc := service("a", "web2", "10.96.0.3")
	tr.SetService(svc)
	_ = p.SyncNow(ctx, false)
	tr.SetService(svc)
	if tr.Pending() != 0 {
		t.Error("same resourceVersion counted as a change")
	}

	// A failed sync is retried as a full one, with the changes still there.
	rp.failing = errors.New("boom")
	tr.SetEndpointSlice(slice("a", "web", "web-1", 8080, "10.244.0.9"))
	if err := p.SyncNow(ctx, false); err == nil {
		t.Fatal("sync did not fail")
	}
	if tr.Pending() == 0 {
		t.Error("changes of a failed sync were dropped")
	}
	rp.failing = nil
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, cs := rp.last(); !cs.Full {
		t.Error("sync after a failure is not full")
	}
	if got := metricValue(p.Metrics().SyncFailures.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("sync failures metric = %v", got)
	}
}

func TestNodeChangeReselects(t *testing.T) {
	ctx := context.Background()
	p, rp := newTestProxy(t, Config{})
	tr := p.Tracker()
	svc := service("a", "web", "10.96.0.1")
	dist := "PreferClose"
	svc.Spec.TrafficDistribution = &dist
	tr.SetService(svc)
	sl := slice("a", "web", "web-1", 8080, "10.244.0.1", "10.244.0.2")
	z1, z2 := "z1", "z2"
	sl.Endpoints[0].Zone, sl.Endpoints[1].Zone = &z1, &z2
	tr.SetEndpointSlice(sl)
	_ = p.SyncNow(ctx, false)
	snap, _ := rp.last()
	for _, sp := range snap.Services {
		if len(sp.Selected.Cluster) != 2 {
			t.Fatalf("no zone yet: %v", ips(sp.Selected.Cluster))
		}
	}
	tr.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{ZoneLabel: "z2"}}})
	_ = p.SyncNow(ctx, false)
	snap, cs := rp.last()
	if !cs.Full {
		t.Error("node change did not force a full sync")
	}
	for _, sp := range snap.Services {
		if got := ips(sp.Selected.Cluster); len(got) != 1 || got[0] != "10.244.0.2" {
			t.Errorf("after zone z2: %v", got)
		}
	}
}

func TestBadInputIsSkipped(t *testing.T) {
	ctx := context.Background()
	p, rp := newTestProxy(t, Config{})
	tr := p.Tracker()
	tr.SetService(service("a", "good", "10.96.0.1"))
	tr.SetService(service("a", "badip", "10.96.0.300"))
	// A name is no hint of the kind (the metric once guessed it from the
	// error text).
	tr.SetService(service("a", "endpointslice-mirror", "10.96.0.301"))
	tr.SetService(service("a", "port0", "10.96.0.3", v1.ServicePort{Name: "x", Port: 0}))
	tr.SetService(service("a", "proto", "10.96.0.4", v1.ServicePort{Name: "x", Port: 80, Protocol: "ICMP"},
		v1.ServicePort{Name: "ok", Port: 81, Protocol: v1.ProtocolUDP}))
	bad := slice("a", "good", "good-1", 8080, "10.244.0.1", "not-an-ip", "10.244.0.2")
	tr.SetEndpointSlice(bad)
	tr.SetEndpointSlice(slice("a", "good", "good-2", 0, "10.244.0.7"))
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	snap, _ := rp.last()
	var names []string
	for n, sp := range snap.Services {
		names = append(names, n.String())
		if n.Name == "good" && len(sp.Endpoints) != 2 {
			t.Errorf("good has endpoints %v", ips(sp.Endpoints))
		}
	}
	if len(snap.Services) != 2 {
		t.Errorf("programmable ports = %v, want a/good:http and a/proto:ok", names)
	}
	svcBad := metricValue(p.Metrics().InvalidInput.WithLabelValues("service"))
	sliceBad := metricValue(p.Metrics().InvalidInput.WithLabelValues("endpointslice"))
	if svcBad != 4 || sliceBad != 2 {
		t.Errorf("invalid input metric: service %v (want 4), endpointslice %v (want 2)", svcBad, sliceBad)
	}
}

func TestServicePortsFor(t *testing.T) {
	svc := service("a", "lb", "10.96.0.10",
		v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053},
		v1.ServicePort{Name: "sctp", Port: 99, Protocol: v1.ProtocolSCTP, NodePort: 30099})
	svc.Spec.Type = v1.ServiceTypeLoadBalancer
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
	svc.Spec.ExternalIPs = []string{"192.0.2.2", "192.0.2.1", "2001:db8::1"}
	svc.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24", "2001:db8::/32"}
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 31000
	svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	to := int32(30)
	svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &to}}
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}, {Hostname: "lb.example"}}
	v4, errs := ServicePortsFor(svc, IPv4)
	if len(errs) != 0 || len(v4) != 2 {
		t.Fatalf("v4: %v %v", v4, errs)
	}
	sp := v4[0]
	if sp.ClusterIP.String() != "10.96.0.10" || sp.NodePort != 30053 || sp.Protocol != UDP || !sp.ExternalPolicyLocal ||
		sp.HealthCheckNodePort != 31000 || sp.AffinityTimeout != 30*time.Second ||
		fmt.Sprint(sp.ExternalIPs) != "[192.0.2.1 192.0.2.2]" || fmt.Sprint(sp.LoadBalancerIPs) != "[198.51.100.1]" ||
		fmt.Sprint(sp.LoadBalancerSourceRanges) != "[203.0.113.0/24]" {
		t.Errorf("v4 port: %+v", sp)
	}
	v6, _ := ServicePortsFor(svc, IPv6)
	if len(v6) != 2 || v6[0].ClusterIP.String() != "fd00::10" || fmt.Sprint(v6[0].ExternalIPs) != "[2001:db8::1]" {
		t.Errorf("v6: %+v", v6)
	}
	headless := service("a", "h", "None")
	if sps, errs := ServicePortsFor(headless, IPv4); len(sps)+len(errs) != 0 {
		t.Error("headless service produced ports")
	}
}

func TestStaleUDPFlows(t *testing.T) {
	name := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "a", Name: "dns"}, Port: "dns", Protocol: UDP}
	mk := func(addrs ...string) *Snapshot {
		sp := &ServicePort{Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 53, Protocol: UDP, NodePort: 30053}
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, Endpoint{IP: netip.MustParseAddr(a), Port: 5353, Ready: true, Serving: true})
		}
		sp.Selected = SelectEndpoints(sp, NodeInfo{})
		return &Snapshot{Services: map[ServicePortName]*ServicePort{name: sp}}
	}
	// changed: name was prev's port before the sync that programs next.
	changed := func(prev, next *Snapshot) map[ServicePortName]*ServicePort {
		return map[ServicePortName]*ServicePort{name: prev.Services[name]}
	}
	// Endpoint removed: flows DNATed to it go, flows to the survivor stay.
	next := mk("10.244.0.1")
	s := staleFlowsOf(changed(mk("10.244.0.1", "10.244.0.2"), next), next)
	for _, c := range []struct {
		f    *netlink.ConntrackFlow
		want bool
	}{
		{flow(17, "10.96.0.10", 53, "10.244.0.2", 5353), true},
		{flow(17, "10.96.0.10", 53, "10.244.0.1", 5353), false},
		{flow(17, "192.168.0.1", 30053, "10.244.0.2", 5353), true}, // via NodePort
		{flow(17, "10.96.0.11", 53, "10.244.0.2", 5353), false},
	} {
		if got := s.MatchConntrackFlow(c.f); got != c.want {
			t.Errorf("removed endpoint: match(%v→%v) = %v", c.f.Forward.DstIP, c.f.Reverse.SrcIP, got)
		}
	}
	// None → some: un-DNATed flows to the VIP go.
	next = mk("10.244.0.1")
	s = staleFlowsOf(changed(mk(), next), next)
	if !s.MatchConntrackFlow(flow(17, "10.96.0.10", 53, "10.96.0.10", 53)) || s.MatchConntrackFlow(flow(17, "10.96.0.10", 53, "10.244.0.1", 5353)) {
		t.Error("none→some: wrong match")
	}
	// Service deleted: flows to its endpoints via the VIP go.
	s = staleFlowsOf(changed(mk("10.244.0.1"), &Snapshot{}), &Snapshot{})
	if !s.MatchConntrackFlow(flow(17, "10.96.0.10", 53, "10.244.0.1", 5353)) {
		t.Error("deleted service: flow to its endpoint kept")
	}
	// New service with endpoints (first sync: every port is new): flows to
	// the VIP that nothing translated go.
	next = mk("10.244.0.1")
	s = staleFlowsOf(map[ServicePortName]*ServicePort{name: nil}, next)
	if !s.MatchConntrackFlow(flow(17, "10.96.0.10", 53, "10.96.0.10", 53)) {
		t.Error("new service: un-DNATed flow to the VIP kept")
	}
	// Unchanged service (not in was): nothing.
	if s := staleFlowsOf(nil, mk("10.244.0.1")); !s.empty() {
		t.Error("unchanged service produced stale flows")
	}
}

// TestStaleTCPFlows: a TCP port that gains endpoints makes the flows to its
// VIP that nothing translated stale (a SYN that got past the rejects while
// it had none); a removed endpoint makes stale the TCP flows it never
// answered, and leaves its connections to end by themselves.
func TestStaleTCPFlows(t *testing.T) {
	name := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "a", Name: "web"}, Port: "http", Protocol: TCP}
	mk := func(addrs ...string) *ServicePort {
		sp := &ServicePort{Name: name, ClusterIP: netip.MustParseAddr("10.96.0.20"), Port: 80, Protocol: TCP, NodePort: 30080,
			ExternalIPs: []netip.Addr{netip.MustParseAddr("192.168.60.20")}}
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, Endpoint{IP: netip.MustParseAddr(a), Port: 8080, Ready: true, Serving: true})
		}
		sp.Selected = SelectEndpoints(sp, NodeInfo{})
		return sp
	}
	snap := func(sp *ServicePort) *Snapshot {
		return &Snapshot{Services: map[ServicePortName]*ServicePort{name: sp}}
	}
	cases := append(tcpVIPCases("10.96.0.20", "192.168.60.20"),
		flowCase{"untranslated to the NodePort (reset by the node)", flow(6, "192.168.50.1", 30080, "192.168.50.1", 30080), false})
	for _, from := range []struct {
		what string
		was  *ServicePort
	}{{"none → some", mk()}, {"new with endpoints", nil}} {
		checkMatches(t, from.what, staleFlowsOf(map[ServicePortName]*ServicePort{name: from.was}, snap(mk("10.244.0.1"))), cases)
	}
	// Endpoints before and after: nothing to untranslate; of the flows to
	// the removed endpoint only the unanswered ones go.
	s := staleFlowsOf(map[ServicePortName]*ServicePort{name: mk("10.244.0.1", "10.244.0.2")}, snap(mk("10.244.0.1")))
	synSent := func(f *netlink.ConntrackFlow) *netlink.ConntrackFlow {
		f.ProtoInfo = &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_SYN_SENT}
		return f
	}
	established := func(f *netlink.ConntrackFlow) *netlink.ConntrackFlow {
		f.ProtoInfo = &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED}
		return f
	}
	checkMatches(t, "endpoint removed", s, []flowCase{
		{"unanswered via the ClusterIP", synSent(flow(6, "10.96.0.20", 80, "10.244.0.2", 8080)), true},
		{"unanswered via the external IP", synSent(flow(6, "192.168.60.20", 80, "10.244.0.2", 8080)), true},
		{"unanswered via the NodePort", synSent(flow(6, "192.168.50.1", 30080, "10.244.0.2", 8080)), true},
		{"established to the removed endpoint", established(flow(6, "10.96.0.20", 80, "10.244.0.2", 8080)), false},
		{"no TCP state", flow(6, "10.96.0.20", 80, "10.244.0.2", 8080), false},
		{"unanswered to the survivor", synSent(flow(6, "10.96.0.20", 80, "10.244.0.1", 8080)), false},
		{"UDP to the removed endpoint (a TCP port's)", flow(17, "10.96.0.20", 80, "10.244.0.2", 8080), false},
		{"unanswered via another VIP", synSent(flow(6, "10.96.0.21", 80, "10.244.0.2", 8080)), false},
	})
	// Still none: the flows were refused, nothing to delete.
	if s := staleFlowsOf(map[ServicePortName]*ServicePort{name: mk()}, snap(mk())); !s.empty() {
		t.Errorf("TCP port without endpoints before and after: stale flows %+v", s)
	}
}

func TestHealthCheckNodePort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 4)
	p, _ := newTestProxy(t, Config{HealthCheckListen: func(ctx context.Context, _ string) (net.Listener, error) {
		ln, err := DefaultListen(ctx, "127.0.0.1:0")
		if err == nil {
			addrs <- ln.Addr().String()
		}
		return ln, err
	}})
	defer p.hc.closeAll()
	svc := service("a", "lb", "10.96.0.10", v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})
	svc.Spec.Type = v1.ServiceTypeLoadBalancer
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 31000
	p.Tracker().SetService(svc)
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	addr := <-addrs
	get := func() (int, map[string]any) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, body := get(); code != http.StatusServiceUnavailable || body["localEndpoints"] != 0.0 {
		t.Errorf("no local endpoints: %d %v", code, body)
	}
	sl := slice("a", "lb", "lb-1", 8080, "10.244.0.1", "10.244.0.2")
	other := "n2"
	sl.Endpoints[1].NodeName = &other
	p.Tracker().SetEndpointSlice(sl)
	if err := p.SyncNow(ctx, false); err != nil {
		t.Fatal(err)
	}
	if code, body := get(); code != http.StatusOK || body["localEndpoints"] != 1.0 {
		t.Errorf("one local endpoint: %d %v", code, body)
	}
}

func TestBucket(t *testing.T) {
	b := newBucket(2, time.Second)
	now := time.Unix(0, 0)
	if b.take(now) != 0 || b.take(now) != 0 {
		t.Fatal("burst of 2 not allowed")
	}
	if w := b.take(now); w != time.Second {
		t.Fatalf("third sync waits %v, want 1s", w)
	}
	if w := b.take(now.Add(3 * time.Second)); w != 0 {
		t.Fatalf("after idle: wait %v", w)
	}
}

func TestRunLoopCoalescesAndRateLimits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, rp := newTestProxy(t, Config{MinSyncPeriod: 200 * time.Millisecond})
	done := make(chan struct{})
	go func() { p.RunLoop(ctx); close(done) }()
	for i := range 50 {
		p.Tracker().SetService(service("a", fmt.Sprint("s", i), fmt.Sprintf("10.96.1.%d", i)))
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if snap := p.Snapshot(IPv4); snap != nil && len(snap.Services) == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("services never synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rp.mu.Lock()
	n := len(rp.syncs)
	rp.mu.Unlock()
	// 250 ms of changes at ≤ burst 2 + 1 per 200 ms: a handful of syncs.
	if n > 6 {
		t.Errorf("%d syncs for 50 changes in 250ms; rate limit not applied", n)
	}
	cancel()
	<-done
}

func metricValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}

func TestProgrammingLatencyFromTriggerTime(t *testing.T) {
	p, _ := newTestProxy(t, Config{})
	// The proxy "started" a minute ago: trigger times before that are
	// history and must not count.
	p.tracker.started = time.Now().Add(-time.Minute)
	p.Tracker().SetService(service("a", "web", "10.96.0.1"))
	annotated := func(name string, ago time.Duration) *discovery.EndpointSlice {
		sl := slice("a", "web", name, 8080, "10.244.0.1")
		sl.Annotations = map[string]string{TriggerTimeAnnotation: time.Now().Add(-ago).Format(time.RFC3339Nano)}
		return sl
	}
	p.Tracker().SetEndpointSlice(annotated("web-1", 3*time.Second))
	p.Tracker().SetEndpointSlice(annotated("web-2", 5*time.Second))
	p.Tracker().SetEndpointSlice(annotated("web-old", 2*time.Minute)) // before the start
	p.Tracker().SetEndpointSlice(slice("a", "web", "web-none", 8080)) // no annotation
	v6 := annotated("web-v6", 4*time.Second)
	v6.AddressType = discovery.AddressTypeIPv6
	p.Tracker().SetEndpointSlice(v6) // another family's proxier measures it
	if err := p.SyncNow(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	var d dto.Metric
	h, _ := p.Metrics().NetworkProgrammingLatency.GetMetricWithLabelValues("IPv4")
	if err := h.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	if n, sum := d.Histogram.GetSampleCount(), d.Histogram.GetSampleSum(); n != 2 || sum < 8 || sum > 9 {
		t.Errorf("latency samples %d sum %.2fs, want 2 samples (3s and 5s, from the annotations)", n, sum)
	}
	// A deletion's annotation dates the slice's last update: not measured.
	p.Tracker().SetEndpointSlice(annotated("web-1", time.Second))
	p.Tracker().DeleteEndpointSlice(annotated("web-2", time.Second))
	if err := p.SyncNow(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	d = dto.Metric{}
	if err := h.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	if n := d.Histogram.GetSampleCount(); n != 2 {
		t.Errorf("latency samples %d after a deletion, want still 2", n)
	}
}

// damagedPlane reports its state gone once, like a data plane whose table
// was flushed by a firewall reload.
type damagedPlane struct {
	*recordingPlane
	damaged atomic.Bool
}

func (d *damagedPlane) Intact(context.Context) (bool, error) { return !d.damaged.Swap(false), nil }

// runLoop runs a Proxy over dp in the background until the test ends.
func runLoop(t *testing.T, integrityPeriod time.Duration, dp DataPlane) *Proxy {
	t.Helper()
	p, err := New(Config{NodeName: "n1", IntegrityCheckPeriod: integrityPeriod, MinSyncPeriod: time.Millisecond}, map[Family]DataPlane{IPv4: dp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.RunLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func TestIntegrityCheckForcesFullSync(t *testing.T) {
	d := &damagedPlane{recordingPlane: &recordingPlane{}}
	p := runLoop(t, 20*time.Millisecond, d)
	syncs := func() int { d.mu.Lock(); defer d.mu.Unlock(); return len(d.syncs) }
	waitSyncs := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); syncs() != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d syncs, want %d", syncs(), n)
			}
		}
	}
	waitSyncs(1)
	time.Sleep(100 * time.Millisecond) // intact checks pass: no more syncs
	if n := syncs(); n != 1 {
		t.Fatalf("%d syncs while the state was intact, want 1", n)
	}
	d.damaged.Store(true)
	waitSyncs(2)
	if _, cs := d.last(); !cs.Full {
		t.Errorf("repair sync was not full: %+v", cs)
	}
	if got := metricValue(p.Metrics().StateRepairs.WithLabelValues("recording", "IPv4")); got != 1 {
		t.Errorf("state repairs metric = %v, want 1", got)
	}
}

func TestSortedPorts(t *testing.T) {
	port := func(ns, name, p string) ServicePortName {
		return ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: p, Protocol: TCP}
	}
	gone, kept, added, other := port("a", "web", "old"), port("a", "web", "http"), port("a", "web", "https"), port("b", "db", "sql")
	programmed := map[ServicePortName]int{gone: 1, kept: 1, other: 1}
	snap := &Snapshot{Services: map[ServicePortName]*ServicePort{kept: {}, added: {}, other: {}}}
	want := []ServicePortName{kept, added, gone}
	slices.SortFunc(want, ServicePortName.Compare)

	scanned := SortedPorts(ChangeSet{Services: map[types.NamespacedName]struct{}{kept.NamespacedName: {}}}, programmed, snap)
	if !slices.Equal(scanned, want) {
		t.Errorf("by scanning: %v, want %v", scanned, want)
	}
	given := SortedPorts(ChangeSet{Ports: map[ServicePortName]struct{}{added: {}, gone: {}, kept: {}}}, programmed, snap)
	if !slices.Equal(given, want) {
		t.Errorf("from Ports: %v, want %v", given, want)
	}
}

func TestUntranslatedFlows(t *testing.T) {
	web := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "a", Name: "web"}, Port: "http", Protocol: TCP}
	empty := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "a", Name: "empty"}, Port: "http", Protocol: TCP}
	sp := &ServicePort{Name: web, ClusterIP: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: TCP,
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.168.60.10")},
		Endpoints:       []Endpoint{{IP: netip.MustParseAddr("10.244.0.1"), Port: 8080, Ready: true, Serving: true}}}
	sp.Selected = SelectEndpoints(sp, NodeInfo{})
	none := &ServicePort{Name: empty, ClusterIP: netip.MustParseAddr("10.96.0.2"), Port: 80, Protocol: TCP}
	none.Selected = SelectEndpoints(none, NodeInfo{})
	u := untranslatedFlows(&Snapshot{Services: map[ServicePortName]*ServicePort{web: sp, empty: none}})
	checkMatches(t, "untranslatedFlows", u, append(tcpVIPCases("10.96.0.1", "192.168.60.10"),
		flowCase{"a service without endpoints (rejected, nothing to translate to)", flow(6, "10.96.0.2", 80, "10.96.0.2", 80), false},
		flowCase{"pod to pod", flow(6, "10.244.0.1", 8080, "10.244.0.1", 8080), false},
	))
	if anyFilter(nil).MatchConntrackFlow(flow(6, "10.96.0.1", 80, "10.96.0.1", 80)) {
		t.Error("an empty anyFilter matched")
	}
	if !(anyFilter{&staleFlows{}, u}).MatchConntrackFlow(flow(6, "10.96.0.1", 80, "10.96.0.1", 80)) {
		t.Error("anyFilter missed its second filter's match")
	}
}

// announcingPlane announces removals through the channel the test feeds
// and counts its integrity checks.
type announcingPlane struct {
	damagedPlane
	announce chan struct{}
	checks   atomic.Int32
}

func (a *announcingPlane) Intact(ctx context.Context) (bool, error) {
	a.checks.Add(1)
	return a.damagedPlane.Intact(ctx)
}

func (a *announcingPlane) WatchChanges(ctx context.Context, changed func()) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.announce:
			changed()
		}
	}
}

// TestChangeEventsTriggerCoalescedCheck: with the periodic check an hour
// away, a burst of announced removals is answered by one integrity check
// (not one per announcement), which repairs at once when the state is
// gone; announcements with the state intact cause no sync.
func TestChangeEventsTriggerCoalescedCheck(t *testing.T) {
	a := &announcingPlane{damagedPlane: damagedPlane{recordingPlane: &recordingPlane{}}, announce: make(chan struct{})}
	p := runLoop(t, time.Hour, a)
	syncs := func() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.syncs) }
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (%d syncs, %d checks)", what, syncs(), a.checks.Load())
			}
		}
	}
	wait("the first sync", func() bool { return syncs() == 1 })

	burst := func() {
		for range 50 {
			a.announce <- struct{}{}
		}
	}
	burst() // intact: checked, not synced
	wait("a check", func() bool { return a.checks.Load() >= 1 })
	time.Sleep(changeCheckInterval + 2*changeDebounce)
	if n := a.checks.Load(); n != 1 {
		t.Errorf("%d checks after a burst of 50 announcements, want 1", n)
	}
	if n := syncs(); n != 1 {
		t.Errorf("%d syncs after announcements with the state intact, want 1", n)
	}

	a.damaged.Store(true)
	burst()
	// Within wait's 5 s, where the periodic check is an hour away.
	wait("the repair", func() bool { return syncs() == 2 })
	if _, cs := a.last(); !cs.Full {
		t.Errorf("repair sync was not full: %+v", cs)
	}
	if got := metricValue(p.Metrics().IntegrityChecks.WithLabelValues("recording", "IPv4", "event")); got != 2 {
		t.Errorf("event-triggered checks metric = %v, want 2", got)
	}
}

// flow is a conntrack flow to dst:dport whose reply comes from be:bport
// (the VIP itself when nothing translated it).
func flow(proto uint8, dst string, dport uint16, be string, bport uint16) *netlink.ConntrackFlow {
	f := &netlink.ConntrackFlow{}
	f.Forward.Protocol, f.Forward.DstIP, f.Forward.DstPort = proto, net.ParseIP(dst), dport
	f.Reverse.SrcIP, f.Reverse.SrcPort = net.ParseIP(be), bport
	return f
}

type flowCase struct {
	what string
	f    *netlink.ConntrackFlow
	want bool
}

// tcpVIPCases are the flows to a TCP service port 80 with endpoint
// 10.244.0.1:8080 and VIPs clusterIP and extraIP (external or LB) that a
// filter of untranslated flows deletes, and the ones it keeps.
func tcpVIPCases(clusterIP, extraIP string) []flowCase {
	return []flowCase{
		{"untranslated to the ClusterIP", flow(6, clusterIP, 80, clusterIP, 80), true},
		{"untranslated to " + extraIP, flow(6, extraIP, 80, extraIP, 80), true},
		{"DNATed to the endpoint", flow(6, clusterIP, 80, "10.244.0.1", 8080), false},
		{"UDP to the TCP port's VIP", flow(17, clusterIP, 80, clusterIP, 80), false},
		{"another port of the VIP", flow(6, clusterIP, 81, clusterIP, 81), false},
	}
}

func checkMatches(t *testing.T, filter string, m netlink.CustomConntrackFilter, cases []flowCase) {
	t.Helper()
	for _, c := range cases {
		if got := m.MatchConntrackFlow(c.f); got != c.want {
			t.Errorf("%s: %s: match = %v, want %v", filter, c.what, got, c.want)
		}
	}
}

// TestConntrackCleanerMergesAndDrains: filters queued while a deletion runs
// go out together in the next one, per family; a stop deletes what is
// still queued; before a start and after a stop, a filter is deleted in
// its caller.
func TestConntrackCleanerMergesAndDrains(t *testing.T) {
	type call struct {
		f Family
		n int
	}
	calls := make(chan call, 10)
	release := make(chan struct{}, 10)
	c := newConntrackCleaner(func(f Family, filter anyFilter) {
		calls <- call{f, len(filter)}
		<-release
	})
	inline := func(what string) {
		t.Helper()
		release <- struct{}{}
		c.add(IPv6, anyFilter{&staleFlows{}})
		select {
		case got := <-calls:
			if got != (call{IPv6, 1}) {
				t.Errorf("%s: deletion %+v", what, got)
			}
		default:
			t.Errorf("%s: add returned before deleting", what)
		}
	}
	inline("not started")

	ctx, cancel := context.WithCancel(context.Background())
	wait := c.start(ctx)
	c.add(IPv4, anyFilter{&staleFlows{}})
	if got := <-calls; got != (call{IPv4, 1}) {
		t.Fatalf("first deletion %+v", got)
	}
	// While it runs: two more IPv4 filters and one IPv6.
	c.add(IPv4, anyFilter{&staleFlows{}})
	c.add(IPv4, anyFilter{&staleFlows{}})
	c.add(IPv6, anyFilter{&staleFlows{}})
	release <- struct{}{}
	if got := <-calls; got != (call{IPv4, 2}) {
		t.Errorf("merged IPv4 deletion %+v, want both filters in one", got)
	}
	release <- struct{}{}
	if got := <-calls; got != (call{IPv6, 1}) {
		t.Errorf("IPv6 deletion %+v", got)
	}

	// Queued at the stop: deleted before wait returns.
	c.mu.Lock()
	c.pending[IPv4] = anyFilter{&staleFlows{}}
	c.mu.Unlock()
	release <- struct{}{} // the IPv6 deletion above
	release <- struct{}{} // the one at the stop
	cancel()
	wait()
	select {
	case got := <-calls:
		if got != (call{IPv4, 1}) {
			t.Errorf("deletion at stop %+v", got)
		}
	default:
		t.Error("a filter queued at the stop was dropped")
	}
	inline("stopped")
}
