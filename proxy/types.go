package proxy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Family is an IP family. Every Snapshot and every DataPlane instance is for
// exactly one family; dual-stack runs one of each.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return "Family(" + strconv.Itoa(int(f)) + ")"
}

// Contains reports whether a belongs to the family (IPv4-mapped IPv6 counts
// as IPv4, matching what the kernel does with such destinations).
func (f Family) Contains(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	if f == IPv4 {
		return a.Unmap().Is4()
	}
	return a.Is6() && !a.Is4In6()
}

// Protocol is a transport protocol a service port can use.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Lower is the protocol as iptables/nft spell it ("tcp").
func (p Protocol) Lower() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return string(p)
}

// ServicePortName identifies one port of one Service, the unit every data
// plane programs (one "service chain" per ServicePortName in iptables terms).
type ServicePortName struct {
	types.NamespacedName
	Port     string // the port's name in the Service spec ("" when unnamed)
	Protocol Protocol
}

// String is "ns/name:port/proto" ("ns/name/proto" when the port is unnamed);
// data planes hash it into chain names, so it must stay stable.
func (n ServicePortName) String() string {
	s := n.Namespace + "/" + n.Name
	if n.Port != "" {
		s += ":" + n.Port
	}
	return s + "/" + string(n.Protocol)
}

// Compare orders names for deterministic output (golden rules).
func (n ServicePortName) Compare(o ServicePortName) int {
	if c := cmpStr(n.Namespace, o.Namespace); c != 0 {
		return c
	}
	if c := cmpStr(n.Name, o.Name); c != 0 {
		return c
	}
	if c := cmpStr(n.Port, o.Port); c != 0 {
		return c
	}
	return cmpStr(string(n.Protocol), string(o.Protocol))
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Endpoint is one backend of one service port, as read from an EndpointSlice.
type Endpoint struct {
	IP   netip.Addr
	Port uint16

	// Conditions as in discovery.k8s.io/v1 (nil conditions already resolved:
	// ready=nil means ready, serving=nil means serving=ready,
	// terminating=nil means false).
	Ready       bool
	Serving     bool
	Terminating bool

	NodeName string
	Zone     string
	// ZoneHints / NodeHints are the EndpointSlice controller's topology hints
	// (hints.forZones / hints.forNodes); empty when it gave none.
	ZoneHints []string
	NodeHints []string

	// IsLocal is NodeName == this node's name.
	IsLocal bool
}

// String is "ip:port" ("[ip]:port" for IPv6), stable for chain hashing.
func (e Endpoint) String() string { return netip.AddrPortFrom(e.IP, e.Port).String() }

// AddrPort is the endpoint as an address:port pair.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.IP, e.Port) }

// ServicePort is everything a data plane needs to program one service port of
// one IP family. All address fields hold only addresses of the snapshot's
// family; they are sorted and deduplicated.
type ServicePort struct {
	Name      ServicePortName
	ClusterIP netip.Addr // always valid (headless / None services are not in snapshots)
	Port      uint16
	Protocol  Protocol
	NodePort  uint16 // 0 when the service has none

	ExternalIPs              []netip.Addr
	LoadBalancerIPs          []netip.Addr // status.loadBalancer.ingress[].ip
	LoadBalancerSourceRanges []netip.Prefix

	// ExternalPolicyLocal: externalTrafficPolicy=Local on a NodePort or
	// LoadBalancer service (or one with externalIPs): external traffic only
	// goes to local endpoints and keeps its source IP.
	ExternalPolicyLocal bool
	// InternalPolicyLocal: internalTrafficPolicy=Local: ClusterIP traffic
	// only goes to local endpoints.
	InternalPolicyLocal bool
	// HealthCheckNodePort is served by the proxy's health server when
	// ExternalPolicyLocal (0 otherwise).
	HealthCheckNodePort uint16

	// AffinityTimeout > 0 means sessionAffinity ClientIP with that timeout.
	AffinityTimeout time.Duration

	// TrafficDistribution is spec.trafficDistribution ("PreferClose",
	// "PreferSameZone", "PreferSameNode") or "".
	TrafficDistribution string

	// Scheduler is the Service's SchedulerAnnotation ("" when absent): the
	// ipvs mode's per-Service scheduler; other modes ignore it.
	Scheduler string

	// Endpoints are all endpoints of this port (ready or not), sorted by
	// address then port. Data planes use Selected, not this.
	Endpoints []Endpoint
	// Selected is SelectEndpoints(this, node) computed when the snapshot was
	// built.
	Selected Selection
}

// ExternallyAccessible reports whether the port has any external entry point
// (NodePort, externalIPs or LB IPs).
func (sp *ServicePort) ExternallyAccessible() bool {
	return sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0
}

// ClusterIPAddrPort is ClusterIP:Port.
func (sp *ServicePort) ClusterIPAddrPort() netip.AddrPort {
	return netip.AddrPortFrom(sp.ClusterIP, sp.Port)
}

// NodeInfo is what the proxy knows about the node it runs on.
type NodeInfo struct {
	Name   string
	Zone   string       // topology.kubernetes.io/zone label
	IPs    []netip.Addr // status.addresses InternalIP (then ExternalIP) of the snapshot's family
	Labels map[string]string
}

// NodePorts says on which local destination addresses NodePorts are open.
type NodePorts struct {
	// All: any local address of the node (iptables "-m addrtype
	// --dst-type LOCAL", nft "fib daddr type local").
	All bool
	// Addrs: otherwise exactly these addresses.
	Addrs []netip.Addr
}

// Snapshot is the complete desired state of one IP family. A data plane must
// treat it as read-only; the core builds a new one for every sync (services
// that did not change share their *ServicePort with the previous snapshot).
type Snapshot struct {
	Family Family
	Node   NodeInfo

	// ClusterCIDRs (of this family) and MasqueradeAll decide masquerading of
	// traffic to service VIPs: traffic whose source is outside every
	// ClusterCIDR (or all traffic with MasqueradeAll) is marked with
	// MasqueradeMark and SNATed on the way out. With no ClusterCIDRs and no
	// MasqueradeAll, only external entry points (NodePort/ExternalIP/LB of
	// eTP=Cluster services) and hairpin traffic are masqueraded.
	ClusterCIDRs  []netip.Prefix
	MasqueradeAll bool

	NodePorts NodePorts

	// Services holds every programmable service port of this family. The
	// proxy changes this map in place at its next build: read it only
	// during the Sync it was given to (the ports themselves are immutable).
	Services map[ServicePortName]*ServicePort
}

// SchedulerAnnotation on a Service picks its IPVS scheduler in the ipvs
// mode ("rr", "lc", "sh", "mh"...; default --ipvs-scheduler).
const SchedulerAnnotation = "nodenet.io/ipvs-scheduler"

// MasqueradeMark is the fwmark bit flanneld's ip-masq rules honour; every data
// plane marks packets to be masqueraded with it (iptables: --set-xmark
// 0x4000/0x4000).
const MasqueradeMark uint32 = 0x4000

// SortedNames returns the snapshot's service port names in a stable order.
func (s *Snapshot) SortedNames() []ServicePortName {
	names := make([]ServicePortName, 0, len(s.Services))
	for n := range s.Services {
		names = append(names, n)
	}
	slices.SortFunc(names, ServicePortName.Compare)
	return names
}

// ChangeSet tells a data plane what changed since its previous successful
// Sync, so it can rewrite only those services' state.
type ChangeSet struct {
	// Full means: rewrite everything (first sync after start, periodic
	// resync, node or NodePort-address change, or the previous sync failed).
	// A data plane must then converge on the snapshot regardless of what it
	// thinks it programmed before.
	Full bool
	// Services changed (added, updated, deleted, or their endpoints
	// changed). A service in this set that is absent from the snapshot was
	// deleted. Only meaningful when !Full.
	Services map[types.NamespacedName]struct{}
	// Ports, when not nil, are the service ports of those services, as
	// they were and as they are: everything a partial sync must look at,
	// without scanning the whole snapshot.
	Ports map[ServicePortName]struct{}
}

// SortedPorts lists, sorted, the service ports a partial sync must
// rewrite: those of the changed services, as programmed (the keys of
// programmed) and as wanted (snap). It uses Ports when the core filled it
// and otherwise scans both maps.
func SortedPorts[V any](c ChangeSet, programmed map[ServicePortName]V, snap *Snapshot) []ServicePortName {
	var out []ServicePortName
	if c.Ports != nil {
		out = make([]ServicePortName, 0, len(c.Ports))
		for n := range c.Ports {
			out = append(out, n)
		}
	} else {
		seen := map[ServicePortName]bool{}
		add := func(n ServicePortName) {
			if c.Has(n.NamespacedName) && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		for n := range programmed {
			add(n)
		}
		for n := range snap.Services {
			add(n)
		}
	}
	slices.SortFunc(out, ServicePortName.Compare)
	return out
}

// Has reports whether the service must be rewritten in this sync.
func (c ChangeSet) Has(n types.NamespacedName) bool {
	if c.Full {
		return true
	}
	_, ok := c.Services[n]
	return ok
}

// SyncResult is what a data plane reports after a successful Sync.
type SyncResult struct {
	// Written is how many rules / elements this sync wrote.
	Written int
	// Total is how many rules / elements the data plane owns now.
	Total int
}

// IntegrityChecker is implemented by data planes that can tell cheaply
// whether their kernel state is still in place: a firewall reload or an
// admin's `nft flush ruleset` removes it behind the proxy's back, and
// partial syncs would not notice until the next full sync (an hour by
// default). The core polls it (Config.IntegrityCheckPeriod) and repairs
// with a full sync. Like kube-proxy's canary chains.
type IntegrityChecker interface {
	// Intact reports false when state the last sync programmed is gone.
	Intact(ctx context.Context) (bool, error)
}

// ChangeWatcher is implemented by IntegrityCheckers whose kernel state
// announces its own removal (nf_tables notifications, see proxy/nfwatch):
// the core then checks Intact within a fraction of a second of a flush
// instead of at the next IntegrityCheckPeriod. The announcements include
// the data plane's own syncs, so the core coalesces them and answers each
// burst with one Intact call, repairing only when it fails.
type ChangeWatcher interface {
	// WatchChanges calls changed (from any goroutine, without blocking
	// on it) whenever state the data plane owns may have been removed,
	// until ctx ends; it returns nil then. It returns ErrNoChangeEvents
	// at once when this data plane's backend announces nothing, and any
	// other error when watching failed; either way the periodic check
	// goes on.
	WatchChanges(ctx context.Context, changed func()) error
}

// ErrNoChangeEvents is WatchChanges' answer when the backend in use
// cannot announce changes (iptables-legacy, a fake runner in tests).
var ErrNoChangeEvents = errors.New("data plane backend announces no changes")

// Preparer is implemented by data planes with start-up work that needs no
// snapshot: the ebpf mode loads, verifies and attaches its programs. Run
// calls Prepare while the informers make their initial lists, so the
// first sync does not pay for it on top of them. A failed Prepare is only
// logged: the first Sync does the work again and reports its error.
// Prepare may still be running when the first Sync is called: the data
// plane serializes the two (the ebpf mode under its mutex).
type Preparer interface {
	Prepare(ctx context.Context) error
}

// DataPlane turns snapshots into kernel state for one IP family. The core
// calls Sync from one goroutine only, never concurrently with itself or with
// Cleanup.
type DataPlane interface {
	// Sync makes the kernel match snap, rewriting at least the services in
	// changed, in one atomic step. On error the core retries with a full
	// ChangeSet.
	Sync(ctx context.Context, snap *Snapshot, changed ChangeSet) (SyncResult, error)
	// Cleanup removes everything this data plane ever programmed (in any
	// process); it succeeds when there is nothing to remove.
	Cleanup(ctx context.Context) error
	// Name is the --proxy-mode value ("iptables").
	Name() string
}
