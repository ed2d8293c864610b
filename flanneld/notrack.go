package flanneld

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/nodenet/nodenet/internal/iptables"
)

// The VXLAN tunnel's own packets (the outer UDP headers between two nodes'
// VTEPs) need no connection tracking: nothing NATs them, and every inner
// flow gets an outer flow of its own (the kernel picks the outer source
// port from the inner flow's hash), so a node that tracks them creates two
// conntrack entries per pod connection (one each way), each walking the
// nat table first. --vxlan-notrack exempts them in the raw table, as
// Cilium's --install-no-conntrack-iptables-rules does for its tunnel. On a
// host whose firewall accepts only ESTABLISHED/RELATED traffic, the
// tunnel's port then needs a rule of its own — which it needed already,
// since every new pod connection opens a new outer flow.
const (
	chainNoTrack   = "NODENET-FLANNEL-NOTRACK"
	commentNoTrack = "nodenet flanneld vxlan notrack"
	nftNoTrack     = "nodenet-flannel-notrack"
)

// noTrackFamily is one family's tunnel endpoint: this node's VTEP address
// (the tunnel's source), the public address peers send to when
// --public-ip names another one of ours, and the VXLAN UDP port.
type noTrackFamily struct {
	vtep, public netip.Addr
	port         int
}

func (f noTrackFamily) family() iptables.Family {
	if f.vtep.Is4() {
		return iptables.IPv4
	}
	return iptables.IPv6
}

// noTrackFamilies returns the families whose tunnel packets are exempted:
// those with a VXLAN device and a known source address (without one the
// kernel picks the source per packet, and a rule matching the port alone
// would also exempt forwarded traffic to that port).
func noTrackFamilies(cfg *Config, ext *ExtIface) []noTrackFamily {
	var out []noTrackFamily
	add := func(vtep, public netip.Addr) {
		if !vtep.IsValid() {
			return
		}
		f := noTrackFamily{vtep: vtep, port: cfg.Backend.Port}
		if public.IsValid() && public != vtep {
			f.public = public
		}
		out = append(out, f)
	}
	if cfg.EnableIPv4 {
		add(ext.IP, ext.PublicIP)
	}
	if cfg.EnableIPv6 {
		add(ext.IPv6, ext.PublicIPv6)
	}
	return out
}

// noTrackRules are the rules of NODENET-FLANNEL-NOTRACK (raw table), which
// both PREROUTING (tunnel packets to us) and OUTPUT (tunnel packets we
// send; their destination port is the VXLAN port both ways) jump to.
func noTrackRules(f noTrackFamily) []string {
	c := fmt.Sprintf(`-m comment --comment "%s"`, commentNoTrack)
	host := func(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }
	var rules []string
	for _, to := range f.destinations() {
		rules = append(rules, fmt.Sprintf("-d %s -p udp -m udp --dport %d %s -j NOTRACK", host(to), f.port, c))
	}
	return append(rules, fmt.Sprintf("-s %s -p udp -m udp --dport %d %s -j NOTRACK", host(f.vtep), f.port, c))
}

// destinations are the addresses tunnel packets to this node arrive at.
func (f noTrackFamily) destinations() []netip.Addr {
	if f.public.IsValid() {
		return []netip.Addr{f.vtep, f.public}
	}
	return []netip.Addr{f.vtep}
}

// noTrackRuleset is the nftables table of one family, same match as
// noTrackRules, replaced atomically like the masquerade table.
func noTrackRuleset(f noTrackFamily) string {
	fam := "ip"
	if !f.vtep.Is4() {
		fam = "ip6"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "add table %s %s\ndelete table %s %s\n", fam, nftNoTrack, fam, nftNoTrack)
	fmt.Fprintf(&b, "table %s %s {\n", fam, nftNoTrack)
	fmt.Fprintf(&b, "\tchain prerouting {\n\t\ttype filter hook prerouting priority raw; policy accept;\n")
	for _, to := range f.destinations() {
		fmt.Fprintf(&b, "\t\t%s daddr %s udp dport %d notrack\n", fam, to, f.port)
	}
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "\tchain output {\n\t\ttype filter hook output priority raw; policy accept;\n")
	fmt.Fprintf(&b, "\t\t%s saddr %s udp dport %d notrack\n\t}\n}\n", fam, f.vtep, f.port)
	return b.String()
}

// noTrackHooks are the raw table's chains that jump to ours, first: ahead
// of anything that would track (a CT target in raw sees the packet before
// conntrack does, and so does NOTRACK).
var noTrackHooks = []string{"PREROUTING", "OUTPUT"}

// iptablesNoTrack keeps NODENET-FLANNEL-NOTRACK and its two jumps, written
// like the masquerade chains (one iptables-restore --noflush per family,
// nothing when the kernel still shows what we last wrote). It shares the
// masquerader's runners, so both use the backend detected once at start.
type iptablesNoTrack struct {
	runner   func(ctx context.Context, f iptables.Family) (iptables.Runner, error)
	families []noTrackFamily
	last     map[iptables.Family]string
}

func newIPTablesNoTrack(m *iptablesMasq, families []noTrackFamily) *iptablesNoTrack {
	return &iptablesNoTrack{runner: m.runner, families: families, last: map[iptables.Family]string{}}
}

// noTrackState is what of ours the raw table of one family holds.
type noTrackState struct {
	rules string
	jumps map[string][]string // per hook
	chain bool
}

func readNoTrackState(ctx context.Context, r iptables.Runner) (noTrackState, error) {
	raw, err := iptables.ReadTable(ctx, r, "raw")
	if err != nil {
		return noTrackState{}, err
	}
	st := noTrackState{rules: strings.Join(raw[chainNoTrack], "\n"), jumps: map[string][]string{}}
	for _, h := range noTrackHooks {
		st.jumps[h] = jumpsTo(raw[h], chainNoTrack)
	}
	_, st.chain = raw[chainNoTrack]
	return st, nil
}

func (st noTrackState) oneJumpEach() bool {
	for _, h := range noTrackHooks {
		if len(st.jumps[h]) != 1 {
			return false
		}
	}
	return true
}

func (m *iptablesNoTrack) Sync(ctx context.Context) (bool, error) {
	changed := false
	for _, f := range m.families {
		fam := f.family()
		r, err := m.runner(ctx, fam)
		if err != nil {
			return changed, err
		}
		st, err := readNoTrackState(ctx, r)
		if err != nil {
			return changed, err
		}
		if st.oneJumpEach() && st.rules != "" && st.rules == m.last[fam] {
			continue
		}
		b := iptables.NewBatch()
		b.Declare("raw", chainNoTrack)
		for _, rule := range noTrackRules(f) {
			b.Append("raw", chainNoTrack, rule)
		}
		for _, h := range noTrackHooks {
			jumps := st.jumps[h]
			if len(jumps) == 0 {
				b.Insert("raw", h, fmt.Sprintf(`-m comment --comment "%s" -j %s`, commentNoTrack, chainNoTrack))
			}
			for _, j := range jumps[min(1, len(jumps)):] {
				b.Delete("raw", h, j)
			}
		}
		if err := r.Restore(ctx, b.Bytes()); err != nil {
			return changed, fmt.Errorf("install %s vxlan notrack rules: %w", fam, err)
		}
		changed = true
		if st, err = readNoTrackState(ctx, r); err != nil {
			return changed, err
		}
		m.last[fam] = st.rules
	}
	return changed, nil
}

// Cleanup removes the jumps and the chain in both families.
func (m *iptablesNoTrack) Cleanup(ctx context.Context) ([]string, error) {
	return cleanupFamilies(ctx, m.cleanupFamily)
}

func (m *iptablesNoTrack) cleanupFamily(ctx context.Context, fam iptables.Family) ([]string, error) {
	r, err := m.runner(ctx, fam)
	if err != nil {
		return nil, err
	}
	st, err := readNoTrackState(ctx, r)
	if err != nil {
		return nil, err
	}
	b := iptables.NewBatch()
	n := 0
	for _, h := range noTrackHooks {
		for _, j := range st.jumps[h] {
			b.Delete("raw", h, j)
			n++
		}
	}
	var removed []string
	if n > 0 {
		removed = append(removed, fmt.Sprintf("%s %d jump(s) to raw %s", fam, n, chainNoTrack))
	}
	if st.chain {
		b.DeleteChain("raw", chainNoTrack)
		removed = append(removed, fmt.Sprintf("%s chain raw %s", fam, chainNoTrack))
	}
	if b.Empty() {
		return nil, nil
	}
	if err := r.Restore(ctx, b.Bytes()); err != nil {
		return nil, fmt.Errorf("remove %s vxlan notrack rules: %w", fam, err)
	}
	delete(m.last, fam)
	return removed, nil
}

// newNFTNoTrack keeps one table per family (ip/ip6 nodenet-flannel-notrack).
func newNFTNoTrack(ns Netns, families []noTrackFamily) *nftTables {
	t := &nftTables{ns: ns, name: nftNoTrack, what: "vxlan notrack", scripts: map[bool]string{}, last: map[bool]string{}}
	for _, f := range families {
		t.scripts[f.vtep.Is4()] = noTrackRuleset(f)
	}
	return t
}
