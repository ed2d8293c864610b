package ipvs

import (
	"context"
	"fmt"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// scaleServices are n ClusterIP services with two endpoints each, and a
// NodePort on the first; replaced(i) is service i with its second
// endpoint replaced.
func scaleServices(n int) (ports []*proxy.ServicePort, replaced func(i int) *proxy.ServicePort) {
	port := func(i int, second int) *proxy.ServicePort {
		opts := []proxytest.PortOpt{proxytest.WithEndpoints(8080, fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), fmt.Sprintf("10.245.%d.%d", second/250, second%250+1))}
		if i == 0 {
			opts = append(opts, proxytest.WithNodePort(30080))
		}
		return proxytest.Port("bench", fmt.Sprintf("svc-%05d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), 80, proxy.TCP, opts...)
	}
	for i := range n {
		ports = append(ports, port(i, i))
	}
	return ports, func(i int) *proxy.ServicePort { return port(i, n+i) }
}

// partialSyncCost is what one endpoint change costs a proxier that holds
// n services: IPVS requests, dumps, VIP and node-address calls, nft runs.
func partialSyncCost(t *testing.T, n int) [5]int {
	t.Helper()
	p, h, host := newFakeProxier(proxy.IPv4, Config{})
	ports, replaced := scaleServices(n)
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Full)
	before := [5]int{h.Requests, h.Dumps, host.VIPRequests, host.NodeAddrCalls, len(host.Scripts)}
	ports[n/2] = replaced(n / 2)
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Changed(ports[n/2].Name))
	after := [5]int{h.Requests, h.Dumps, host.VIPRequests, host.NodeAddrCalls, len(host.Scripts)}
	var cost [5]int
	for i := range cost {
		cost[i] = after[i] - before[i]
	}
	return cost
}

// TestPartialSyncCostIsTheChange: an endpoint change costs the same
// whatever the number of services: no dump, no VIP or node-address
// listing, a few IPVS requests (the new real server and the old one's
// weight 0 in one, the drained one's counts, its deletion) and one nft
// run (the hairpin elements).
func TestPartialSyncCostIsTheChange(t *testing.T) {
	small, large := partialSyncCost(t, 20), partialSyncCost(t, 1000)
	if small != large {
		t.Fatalf("an endpoint change cost %v at 20 services and %v at 1,000 (IPVS requests, dumps, VIP calls, node-address calls, nft runs)", small, large)
	}
	if want := [5]int{3, 0, 0, 0, 1}; large != want {
		t.Fatalf("an endpoint change cost %v, want %v (IPVS requests, dumps, VIP calls, node-address calls, nft runs)", large, want)
	}
}

// TestFailedPartialWriteIsRepaired: a write that fails in a partial sync
// leaves its service unsure; the next sync, partial and with no change,
// reads it back and completes it, to the state a fresh full sync makes.
func TestFailedPartialWriteIsRepaired(t *testing.T) {
	p, h, host := newFakeProxier(proxy.IPv4, Config{})
	ports, replaced := scaleServices(10)
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Full)
	ports[3] = replaced(3)
	snap := proxytest.Snapshot(proxy.IPv4, ports...)
	newEP := ports[3].Endpoints[1].IP
	h.FailAt = func(op Op) bool { return op.Kind == OpAddDestination && op.Dest.Addr == newEP }
	if _, err := p.Sync(t.Context(), snap, proxytest.Changed(ports[3].Name)); err == nil {
		t.Fatal("the sync whose write failed succeeded")
	}
	h.FailAt = nil
	// The old real server was set to weight 0 by the same request; the
	// new one is missing.
	syncOK(t, p, snap, proxy.ChangeSet{Ports: map[proxy.ServicePortName]struct{}{}})
	fresh, freshHost := NewFake(), NewFakeHost()
	syncOK(t, New(proxy.IPv4, fresh, freshHost, Config{}, testapi.Logger()), snap, proxytest.Full)
	if got, want := Dump(proxy.IPv4, h, host), Dump(proxy.IPv4, fresh, freshHost); got != want {
		t.Fatalf("after the repairing sync:\n%s\nwant (a fresh full sync):\n%s", got, want)
	}
	// Repaired, the next sync without changes writes nothing.
	before := h.Calls
	if res := syncOK(t, p, snap, proxy.ChangeSet{Ports: map[proxy.ServicePortName]struct{}{}}); res.Written != 0 || h.Calls != before {
		t.Fatalf("a sync after the repair wrote %d (%d calls)", res.Written, h.Calls-before)
	}
}

// TestPartialSyncRemovesService: a deleted service's virtual server, VIP
// and elements go in a partial sync, and its NodePort record with the
// next table write.
func TestPartialSyncRemovesService(t *testing.T) {
	p, h, host := newFakeProxier(proxy.IPv4, Config{})
	ports, _ := scaleServices(5)
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Full)
	gone := ports[0]
	snap := proxytest.Snapshot(proxy.IPv4, ports[1:]...)
	syncOK(t, p, snap, proxytest.Changed(gone.Name))
	if _, ok, _ := h.Service(ServiceKey{Addr: gone.ClusterIP, Port: 80, Protocol: proxy.TCP}); ok {
		t.Fatal("the deleted service's virtual server is still there")
	}
	if v, _ := host.VIPs(proxy.IPv4); len(v) != 4 || v[0] == gone.ClusterIP {
		t.Fatalf("VIPs after the deletion: %v", v)
	}
	// The next table write drops the NodePort's record.
	ports2, replaced := scaleServices(5)
	ports2 = ports2[1:]
	ports2[0] = replaced(1)
	snap = proxytest.Snapshot(proxy.IPv4, ports2...)
	syncOK(t, p, snap, proxytest.Changed(ports2[0].Name))
	fresh, freshHost := NewFake(), NewFakeHost()
	syncOK(t, New(proxy.IPv4, fresh, freshHost, Config{}, testapi.Logger()), snap, proxytest.Full)
	if got, want := Dump(proxy.IPv4, h, host), Dump(proxy.IPv4, fresh, freshHost); got != want {
		t.Fatalf("after partial syncs:\n%s\nwant (a fresh full sync):\n%s", got, want)
	}
	if rec, _ := host.RecordedNodePorts(t.Context(), proxy.IPv4); len(rec) != 0 {
		t.Fatalf("record after the NodePort's service went: %v", rec)
	}
}

// TestKernelPartialSyncRequests holds the kernel side to
// TestPartialSyncCostIsTheChange: after a full sync of 300 services, an
// endpoint change sends three IPVS requests and lists no service, as the
// fake counts.
func TestKernelPartialSyncRequests(t *testing.T) {
	requireGuest(t)
	node := nettest.New(t)
	node.MustExec(t, "ip", "link", "set", "lo", "up")
	h, err := Open(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p := New(proxy.IPv4, h, NetHost{Netns: node.Path()}, Config{}, testapi.Logger())
	ports, replaced := scaleServices(300)
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Full)
	before := h.Stats()
	ports[150] = replaced(150)
	snap := proxytest.Snapshot(proxy.IPv4, ports...)
	syncOK(t, p, snap, proxytest.Changed(ports[150].Name))
	after := h.Stats()
	if got := (NetlinkStats{Requests: after.Requests - before.Requests, Messages: after.Messages - before.Messages, Dumps: after.Dumps - before.Dumps}); got != (NetlinkStats{Requests: 3, Messages: 4, Dumps: 0}) {
		t.Fatalf("an endpoint change sent %+v, want 3 requests of 4 messages and no listing (add + weight 0, drained counts, delete)", got)
	}
	dests, err := h.Destinations(ServiceKey{Addr: ports[150].ClusterIP, Port: 80, Protocol: proxy.TCP})
	if err != nil {
		t.Fatal(err)
	}
	SortDestinations(dests)
	if len(dests) != 2 || dests[0].Addr != ports[150].Endpoints[0].IP || dests[1].Addr != ports[150].Endpoints[1].IP {
		t.Fatalf("real servers after the change: %+v", dests)
	}
	if err := p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
}
