package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Conntrack deletes conntrack entries; NetlinkConntrack is the real one.
type Conntrack interface {
	DeleteFlows(f Family, filter netlink.CustomConntrackFilter) (uint, error)
}

// NetlinkConntrack deletes flows through a netlink handle (nil: the current
// namespace; tests pass a handle opened in their namespace).
type NetlinkConntrack struct{ Handle *netlink.Handle }

// DeleteFlows deletes every flow of family f the filter matches (one table
// dump, one delete per match).
func (c NetlinkConntrack) DeleteFlows(f Family, filter netlink.CustomConntrackFilter) (uint, error) {
	fam := netlink.InetFamily(unix.AF_INET)
	if f == IPv6 {
		fam = netlink.InetFamily(unix.AF_INET6)
	}
	h := c.Handle
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(unix.NETLINK_NETFILTER); err != nil {
			return 0, fmt.Errorf("open netfilter netlink: %w", err)
		}
		defer h.Close()
	}
	n, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filter)
	if err != nil {
		return n, fmt.Errorf("delete conntrack flows: %w", err)
	}
	return n, nil
}

// staleFlows is the set of flows a sync made stale.
type staleFlows struct {
	// gained: the VIP:ports, of every protocol, of service ports that went
	// from no reachable endpoint to some (or appeared with some). A flow
	// to one of them that no rule translated was created while nothing
	// could: a UDP flow answered by a reject or unrouted, or a TCP SYN that
	// left the node untranslated because an ACCEPT ahead of the proxy's
	// rejects in FORWARD (flanneld's, before it appended its jump; a host
	// firewall's) or the time before the proxy's sync let it through. It
	// keeps the client's 5-tuple untranslated (TCP SYN_SENT: 120 s, renewed
	// by each SYN), so a client whose ephemeral ports come round to it
	// times out with the endpoints long programmed: the chaos suite's
	// bursts of ClusterIP timeouts up to two minutes after its load began
	// before the proxy had the Service's endpoints.
	gained untranslated
	// dstPorts: UDP NodePorts that went from no endpoints to some
	// (untranslated flows matched on destination port only).
	dstPorts map[uint16]struct{}
	// viaEndpoint: flows to a VIP:port DNATed to an endpoint that is gone
	// (TCP: only those the endpoint never answered; see noteRemoved).
	viaEndpoint map[viaEP]struct{}
	// nodePortEndpoint: flows to a NodePort DNATed to an endpoint that is
	// gone (TCP: likewise only the unanswered ones).
	nodePortEndpoint map[nodePortEP]struct{}
}

type viaEP struct {
	proto   uint8
	vip, ep netip.AddrPort
}

type nodePortEP struct {
	proto uint8
	port  uint16
	ep    netip.AddrPort
}

func (s *staleFlows) empty() bool {
	return len(s.gained) == 0 && len(s.dstPorts) == 0 && len(s.viaEndpoint) == 0 && len(s.nodePortEndpoint) == 0
}

// vips lists the VIP:port entry points of a service port (not NodePort).
func vips(sp *ServicePort) []netip.AddrPort {
	out := []netip.AddrPort{sp.ClusterIPAddrPort()}
	for _, a := range sp.ExternalIPs {
		out = append(out, netip.AddrPortFrom(a, sp.Port))
	}
	for _, a := range sp.LoadBalancerIPs {
		out = append(out, netip.AddrPortFrom(a, sp.Port))
	}
	return out
}

// staleFlowsOf finds the flows made stale by the changes in was (each
// changed port as the last successful sync programmed it, nil when it did
// not exist) now that next is programmed: untranslated flows to the VIPs of
// ports that gained endpoints, of any protocol, UDP flows to removed
// endpoints and TCP flows that a removed endpoint never answered. Ports
// outside was are unchanged and have none. On the first sync was holds
// every port, as new.
func staleFlowsOf(was map[ServicePortName]*ServicePort, next *Snapshot) *staleFlows {
	s := &staleFlows{
		gained: untranslated{}, dstPorts: map[uint16]struct{}{},
		viaEndpoint: map[viaEP]struct{}{}, nodePortEndpoint: map[nodePortEP]struct{}{},
	}
	for n, old := range was {
		sp := next.Services[n]
		if sp != nil && len(sp.Selected.AllReachable) > 0 && (old == nil || len(old.Selected.AllReachable) == 0) {
			s.noteGained(sp)
		}
		if old == nil || sp == old {
			continue
		}
		s.noteRemoved(old, sp)
	}
	return s
}

// noteGained records the entry points of sp, which has endpoints now and
// had none at the last sync.
func (s *staleFlows) noteGained(sp *ServicePort) {
	proto, ok := ipProto(sp.Protocol)
	if !ok {
		return
	}
	for _, v := range vips(sp) {
		s.gained[protoAddrPort{proto, v}] = struct{}{}
	}
	// A TCP SYN to a NodePort that nothing translated reaches the node's
	// own stack, whose reset closes the flow, and conntrack starts a new
	// flow for the next SYN of a closed one; a UDP flow stays.
	if sp.Protocol == UDP && sp.NodePort != 0 {
		s.dstPorts[sp.NodePort] = struct{}{}
	}
}

// noteRemoved records the flows through old's entry points to the
// endpoints that sp (nil: deleted) no longer has. UDP has no connection to
// end, so its flows would keep going to the gone endpoint. A TCP flow the
// endpoint never answered is as stale: the endpoint died (its pod gone, its
// node cut off) before it left the Service, and a client that reuses the
// 5-tuple (ephemeral ports come round in well under SYN_SENT's 120 s at a
// few hundred connections a second) sends its SYN into that flow and
// follows its DNAT to the dead endpoint instead of the rules to a live one.
// TCP flows the endpoint did answer are connections, left to end by
// themselves: an endpoint also leaves when it only turns unready.
func (s *staleFlows) noteRemoved(old, sp *ServicePort) {
	proto, ok := ipProto(old.Protocol)
	if !ok || proto == unix.IPPROTO_SCTP {
		return
	}
	now := map[netip.AddrPort]bool{}
	if sp != nil {
		for _, e := range sp.Selected.AllReachable {
			now[e.AddrPort()] = true
		}
	}
	for _, e := range old.Selected.AllReachable {
		if now[e.AddrPort()] {
			continue
		}
		for _, v := range vips(old) {
			s.viaEndpoint[viaEP{proto, v, e.AddrPort()}] = struct{}{}
		}
		if old.NodePort != 0 {
			s.nodePortEndpoint[nodePortEP{proto, old.NodePort, e.AddrPort()}] = struct{}{}
		}
	}
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (s *staleFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if s.gained.MatchConntrackFlow(flow) {
		return true
	}
	proto := flow.Forward.Protocol
	switch proto {
	case unix.IPPROTO_UDP:
	case unix.IPPROTO_TCP:
		if !unanswered(flow) {
			return false
		}
	default:
		return false
	}
	dst, ok1 := addrPort(flow.Forward.DstIP, flow.Forward.DstPort)
	be, ok2 := addrPort(flow.Reverse.SrcIP, flow.Reverse.SrcPort)
	if !ok1 || !ok2 {
		return false
	}
	if _, ok := s.dstPorts[dst.Port()]; ok && be == dst && proto == unix.IPPROTO_UDP {
		// Not DNATed (the reply comes from the node itself): the flow was
		// created while the NodePort had no endpoints.
		return true
	}
	if _, ok := s.viaEndpoint[viaEP{proto, dst, be}]; ok {
		return true
	}
	if _, ok := s.nodePortEndpoint[nodePortEP{proto, dst.Port(), be}]; ok {
		return true
	}
	return false
}

// unanswered reports whether a TCP flow is still at its client's SYN: the
// endpoint sent nothing back, so no connection exists to break.
func unanswered(flow *netlink.ConntrackFlow) bool {
	tcp, ok := flow.ProtoInfo.(*netlink.ProtoInfoTCP)
	return ok && tcp.State == nl.TCP_CONNTRACK_SYN_SENT
}

// untranslated is the set of flows to service VIPs that no rule translated:
// their reply would come from the VIP itself. While a service port has
// reachable endpoints its rules DNAT every new flow to its VIPs, so such a
// flow was created while the rules were missing (the proxy's chain or table
// flushed by hand, a firewall reload, the node before the first sync). The
// kernel decides NAT on a flow's first packet only and keeps the untranslated
// binding for the flow's life: a TCP client reusing the 5-tuple sends its SYN
// into the SYN_SENT entry (120 s, renewed by every SYN), a UDP client into
// the unreplied one, and both go on timing out after the rules are back.
// The chaos suite saw this as bursts of ClusterIP timeouts for minutes after
// the flush fault, whenever node-1's client's ephemeral ports came round to
// the poisoned ones.
type untranslated map[protoAddrPort]struct{}

type protoAddrPort struct {
	proto uint8
	dst   netip.AddrPort
}

// untranslatedFlows lists every VIP:port of the service ports in snap that
// have reachable endpoints, for a full sync (a repair among them) to delete
// the flows to them that bypassed the rules.
func untranslatedFlows(snap *Snapshot) untranslated {
	u := untranslated{}
	for _, sp := range snap.Services {
		if len(sp.Selected.AllReachable) == 0 {
			continue
		}
		proto, ok := ipProto(sp.Protocol)
		if !ok {
			continue
		}
		for _, v := range vips(sp) {
			u[protoAddrPort{proto, v}] = struct{}{}
		}
	}
	return u
}

func ipProto(p Protocol) (uint8, bool) {
	switch p {
	case TCP:
		return unix.IPPROTO_TCP, true
	case UDP:
		return unix.IPPROTO_UDP, true
	case SCTP:
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (u untranslated) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	dst, ok1 := addrPort(flow.Forward.DstIP, flow.Forward.DstPort)
	be, ok2 := addrPort(flow.Reverse.SrcIP, flow.Reverse.SrcPort)
	if !ok1 || !ok2 || be != dst {
		return false
	}
	_, ok := u[protoAddrPort{flow.Forward.Protocol, dst}]
	return ok
}

// anyFilter matches a flow any of its filters matches, so that one table
// dump serves them all.
type anyFilter []netlink.CustomConntrackFilter

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (a anyFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, f := range a {
		if f.MatchConntrackFlow(flow) {
			return true
		}
	}
	return false
}

func addrPort(ip net.IP, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Unmap(), port), true
}

// conntrackCleaner deletes stale flows off the sync loop's path while it
// runs (RunLoop), and in the caller otherwise (SyncNow alone, after a
// stop). Filters handed to it between two deletions are merged, so a burst
// of syncs costs one table dump per family, not one each. A flow matched
// by an older filter is stale still: the filters only ever name flows to
// endpoints that had left, or to VIPs their rules did not translate.
type conntrackCleaner struct {
	delete  func(Family, anyFilter)
	wake    chan struct{}
	mu      sync.Mutex
	running bool
	pending map[Family]anyFilter
}

func newConntrackCleaner(del func(Family, anyFilter)) *conntrackCleaner {
	return &conntrackCleaner{delete: del, pending: map[Family]anyFilter{}, wake: make(chan struct{}, 1)}
}

// add deletes filter's flows of f: queued while the cleaner runs, at once
// otherwise.
func (c *conntrackCleaner) add(f Family, filter anyFilter) {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		c.delete(f, filter)
		return
	}
	c.pending[f] = append(c.pending[f], filter...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// start deletes what is queued on a goroutine of its own until ctx ends.
// The returned func waits for it; by then what was queued is deleted and
// later adds delete in their caller, so no filter is dropped at a stop.
func (c *conntrackCleaner) start(ctx context.Context) (wait func()) {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				c.drain(false)
				return
			case <-c.wake:
				c.drain(true)
			}
		}
	}()
	return func() { <-done }
}

// drain deletes what is queued; running false ends the queueing.
func (c *conntrackCleaner) drain(running bool) {
	c.mu.Lock()
	pending := c.pending
	c.pending = map[Family]anyFilter{}
	c.running = running
	c.mu.Unlock()
	for _, f := range []Family{IPv4, IPv6} {
		if filter := pending[f]; len(filter) > 0 {
			c.delete(f, filter)
		}
	}
}
