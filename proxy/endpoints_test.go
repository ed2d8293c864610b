package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

func ep(ip string, ready, serving, terminating bool, node, zone string) Endpoint {
	return Endpoint{IP: netip.MustParseAddr(ip), Port: 80, Ready: ready, Serving: serving, Terminating: terminating,
		NodeName: node, Zone: zone, IsLocal: node == "n1"}
}

func ips(eps []Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.IP.String())
	}
	return out
}

func TestSelectEndpoints(t *testing.T) {
	node := NodeInfo{Name: "n1", Zone: "z1"}
	readyLocal := ep("10.0.0.1", true, true, false, "n1", "z1")
	readyRemote := ep("10.0.0.2", true, true, false, "n2", "z2")
	termLocal := ep("10.0.0.3", false, true, true, "n1", "z1")
	termRemote := ep("10.0.0.4", false, true, true, "n2", "z2")
	notServing := ep("10.0.0.5", false, false, true, "n1", "z1")
	sameZoneRemote := ep("10.0.0.6", true, true, false, "n3", "z1")
	hinted := func(e Endpoint, zones ...string) Endpoint { e.ZoneHints = zones; return e }

	tests := []struct {
		name          string
		sp            ServicePort
		cluster       []string // nil: not used
		local         []string
		usesCl, usesL bool
	}{
		{name: "cluster policy, ready only",
			sp:      ServicePort{Endpoints: []Endpoint{readyLocal, readyRemote, termLocal}},
			cluster: []string{"10.0.0.1", "10.0.0.2"}, usesCl: true},
		{name: "terminating fallback when nothing ready",
			sp:      ServicePort{Endpoints: []Endpoint{termLocal, termRemote, notServing}},
			cluster: []string{"10.0.0.3", "10.0.0.4"}, usesCl: true},
		{name: "no endpoints at all: empty but used (REJECT)",
			sp:      ServicePort{},
			cluster: []string{}, usesCl: true},
		{name: "iTP Local: local only, cluster unused",
			sp:    ServicePort{InternalPolicyLocal: true, Endpoints: []Endpoint{readyLocal, readyRemote}},
			local: []string{"10.0.0.1"}, usesL: true},
		{name: "iTP Local with only remote endpoints: empty local list",
			sp:    ServicePort{InternalPolicyLocal: true, Endpoints: []Endpoint{readyRemote}},
			local: []string{}, usesL: true},
		{name: "eTP Local NodePort: cluster for internal, local for external",
			sp:      ServicePort{NodePort: 30000, ExternalPolicyLocal: true, Endpoints: []Endpoint{readyLocal, readyRemote}},
			cluster: []string{"10.0.0.1", "10.0.0.2"}, local: []string{"10.0.0.1"}, usesCl: true, usesL: true},
		{name: "eTP Local, local terminating fallback",
			sp:      ServicePort{NodePort: 30000, ExternalPolicyLocal: true, Endpoints: []Endpoint{termLocal, readyRemote}},
			cluster: []string{"10.0.0.2"}, local: []string{"10.0.0.3"}, usesCl: true, usesL: true},
		{name: "eTP Local without external entry point behaves as Cluster",
			sp:      ServicePort{ExternalPolicyLocal: true, Endpoints: []Endpoint{readyLocal, readyRemote}},
			cluster: []string{"10.0.0.1", "10.0.0.2"}, usesCl: true},
		{name: "PreferClose without hints: same zone",
			sp:      ServicePort{TrafficDistribution: "PreferClose", Endpoints: []Endpoint{readyLocal, readyRemote, sameZoneRemote}},
			cluster: []string{"10.0.0.1", "10.0.0.6"}, usesCl: true},
		{name: "PreferSameZone with no endpoint in zone: all",
			sp:      ServicePort{TrafficDistribution: "PreferSameZone", Endpoints: []Endpoint{readyRemote}},
			cluster: []string{"10.0.0.2"}, usesCl: true},
		{name: "PreferSameNode: local first",
			sp:      ServicePort{TrafficDistribution: "PreferSameNode", Endpoints: []Endpoint{readyLocal, readyRemote, sameZoneRemote}},
			cluster: []string{"10.0.0.1"}, usesCl: true},
		{name: "hints on every endpoint: the zone's hinted ones",
			sp:      ServicePort{Endpoints: []Endpoint{hinted(readyLocal, "z2"), hinted(readyRemote, "z1")}},
			cluster: []string{"10.0.0.2"}, usesCl: true},
		{name: "hints missing on one endpoint: ignored",
			sp:      ServicePort{Endpoints: []Endpoint{hinted(readyLocal, "z2"), readyRemote}},
			cluster: []string{"10.0.0.1", "10.0.0.2"}, usesCl: true},
		{name: "topology does not apply to the local list",
			sp:      ServicePort{NodePort: 1, ExternalPolicyLocal: true, TrafficDistribution: "PreferClose", Endpoints: []Endpoint{readyLocal, readyRemote}},
			cluster: []string{"10.0.0.1"}, local: []string{"10.0.0.1"}, usesCl: true, usesL: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := SelectEndpoints(&tc.sp, node)
			if sel.UsesCluster != tc.usesCl || sel.UsesLocal != tc.usesL {
				t.Fatalf("uses cluster/local = %v/%v, want %v/%v", sel.UsesCluster, sel.UsesLocal, tc.usesCl, tc.usesL)
			}
			if got := ips(sel.Cluster); !slices.Equal(got, tc.cluster) || (sel.Cluster == nil) != (tc.cluster == nil) {
				t.Errorf("cluster = %v, want %v", got, tc.cluster)
			}
			if got := ips(sel.Local); !slices.Equal(got, tc.local) || (sel.Local == nil) != (tc.local == nil) {
				t.Errorf("local = %v, want %v", got, tc.local)
			}
			want := map[string]bool{}
			for _, s := range append(slices.Clone(tc.cluster), tc.local...) {
				want[s] = true
			}
			if len(sel.AllReachable) != len(want) {
				t.Errorf("all reachable = %v, want the union of %v and %v", ips(sel.AllReachable), tc.cluster, tc.local)
			}
		})
	}
}

func TestNodePortAddresses(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("192.168.1.2"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("127.0.0.1")}
	node := []netip.Addr{netip.MustParseAddr("192.168.1.2")}
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		n    NodePortAddresses
		fam  Family
		want NodePorts
	}{
		{NodePortAddresses{}, IPv4, NodePorts{All: true}},
		{NodePortAddresses{CIDRs: []netip.Prefix{p("10.0.0.0/8")}}, IPv4, NodePorts{Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}}},
		{NodePortAddresses{CIDRs: []netip.Prefix{p("10.0.0.0/8"), p("fd00::/64")}}, IPv6, NodePorts{Addrs: []netip.Addr{netip.MustParseAddr("fd00::5")}}},
		{NodePortAddresses{CIDRs: []netip.Prefix{p("10.0.0.0/8")}}, IPv6, NodePorts{All: true}}, // no CIDR of this family
		{NodePortAddresses{Primary: true}, IPv4, NodePorts{Addrs: node}},
		{NodePortAddresses{Primary: true, CIDRs: []netip.Prefix{p("127.0.0.0/8")}}, IPv4, NodePorts{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.168.1.2")}}},
	} {
		if got := tc.n.Resolve(tc.fam, local, node); !got.Equal(tc.want) {
			t.Errorf("%+v %v: got %+v, want %+v", tc.n, tc.fam, got, tc.want)
		}
	}
}

// TestEndpointsForDeduplicates: an address:port in several EndpointSlices
// (a slice being split or moved by the controller) is one endpoint: the
// first ready copy, else the first; the list comes out sorted, sized to
// what it holds, and per port.
func TestEndpointsForDeduplicates(t *testing.T) {
	svc := service("a", "web", "10.96.0.1",
		v1.ServicePort{Name: "http", Port: 80, Protocol: v1.ProtocolTCP},
		v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP})
	sps, errs := ServicePortsFor(svc, IPv4)
	if len(errs) > 0 || len(sps) != 2 {
		t.Fatal(sps, errs)
	}
	notReady := slice("a", "web", "web-1", 8080, "10.244.0.9", "10.244.0.2")
	notReady.Endpoints[0].Conditions.Ready = ptr(false)
	notReady.Endpoints[0].NodeName = ptr("first")
	ready := slice("a", "web", "web-2", 8080, "10.244.0.9", "10.244.0.1")
	ready.Endpoints[0].NodeName = ptr("second")
	again := slice("a", "web", "web-3", 8080, "10.244.0.9")
	again.Endpoints[0].NodeName = ptr("third")
	dns, udp := "dns", v1.ProtocolUDP
	udpSlice := slice("a", "web", "web-udp", 5353, "10.244.0.9", "10.244.0.9")
	udpSlice.Ports[0].Name, udpSlice.Ports[0].Protocol = &dns, &udp
	udpSlice.Endpoints[0].Conditions.Ready = ptr(false)
	udpSlice.Endpoints[0].NodeName = ptr("udp-first")
	udpSlice.Endpoints[1].Conditions.Ready = ptr(false)
	if errs := EndpointsFor(sps, []*discovery.EndpointSlice{notReady, ready, again, udpSlice}, IPv4, "n1"); len(errs) > 0 {
		t.Fatal(errs)
	}
	http, udpPort := sps[0], sps[1]
	if http.Protocol != TCP {
		http, udpPort = udpPort, http
	}
	var got []string
	for _, e := range http.Endpoints {
		got = append(got, fmt.Sprintf("%s %s ready=%v", e, e.NodeName, e.Ready))
	}
	want := []string{"10.244.0.1:8080 n1 ready=true", "10.244.0.2:8080 n1 ready=true", "10.244.0.9:8080 second ready=true"}
	if !slices.Equal(got, want) {
		t.Errorf("tcp endpoints %q, want %q", got, want)
	}
	if cap(http.Endpoints) != 5 {
		t.Errorf("tcp list capacity %d, want the 5 endpoints seen before deduplication", cap(http.Endpoints))
	}
	if len(udpPort.Endpoints) != 1 || udpPort.Endpoints[0].NodeName != "udp-first" || udpPort.Endpoints[0].Port != 5353 {
		t.Errorf("udp endpoints %+v, want the first of two not-ready copies", udpPort.Endpoints)
	}
}
