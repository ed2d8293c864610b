package proxycmd

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/internal/cgroup2"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/cli"
	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/app"
	"github.com/nodenet/nodenet/proxy/ebpf"
	"github.com/nodenet/nodenet/proxy/iptables"
	"github.com/nodenet/nodenet/proxy/ipvs"
	"github.com/nodenet/nodenet/proxy/nftables"
)

// Component names the proxy to the API server (its user agent) and in its
// logs, whichever binary runs it.
const Component = "nodenet-proxy"

// Run is the proxy command (`nodenet proxy`, `nodenet-proxy`): kube-proxy's
// flags, one data plane per --proxy-mode chosen from the explicit map of
// Modes, running until ctx ends.
func Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var (
		o                    app.Options
		kubeconfig, hostname string
		cleanup, dump        bool
		eb                   ebpfFlags
		logs                 cli.LogFlags
		ipvsCfg              ipvs.Config
	)
	fs.StringVar(&o.Mode, "proxy-mode", "iptables", "data plane: iptables, nftables, ipvs or ebpf")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&hostname, "hostname-override", "", "this node's name (default $NODE_NAME, else the host name)")
	fs.Var(cli.NewCIDRsFlag(&o.Core.ClusterCIDRs, cidrlist.DualStack), "cluster-cidr", "pod CIDR(s) of the cluster, comma-separated per family; traffic to services from outside them is masqueraded")
	fs.BoolVar(&o.Core.MasqueradeAll, "masquerade-all", false, "masquerade all traffic to service IPs")
	fs.Var(&NodePortFlag{Dst: &o.Core.NodePortAddresses}, "nodeport-addresses", `CIDRs whose local addresses accept NodePorts, or "primary" (the node's IPs); default: all local addresses`)
	fs.DurationVar(&o.Core.MinSyncPeriod, "min-sync-period", time.Second, "minimum interval between syncs (a burst of 2 is allowed)")
	fs.DurationVar(&o.Core.SyncPeriod, "sync-period", time.Hour, "interval of full resyncs (partial syncs between)")
	fs.StringVar(&o.HealthzBindAddress, "healthz-bind-address", "0.0.0.0:10256", `/healthz and /livez address ("" = off)`)
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", "127.0.0.1:10249", `/metrics address ("" = off)`)
	fs.BoolVar(&o.Profiling, "profiling", false, "serve Go's /debug/pprof/ on the metrics address")
	fs.BoolVar(&cleanup, "cleanup", false, "remove every proxy mode's rules and exit")
	fs.StringVar(&ipvsCfg.Scheduler, "ipvs-scheduler", "rr", "ipvs mode: the IPVS scheduler of Services without the "+proxy.SchedulerAnnotation+" annotation (rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh)")
	fs.DurationVar(&ipvsCfg.Timeouts.TCP, "ipvs-tcp-timeout", 0, "ipvs mode: idle timeout of established IPVS TCP connections (0 = leave the kernel's)")
	fs.DurationVar(&ipvsCfg.Timeouts.TCPFin, "ipvs-tcpfin-timeout", 0, "ipvs mode: timeout of IPVS TCP connections after a FIN (0 = leave the kernel's)")
	fs.DurationVar(&ipvsCfg.Timeouts.UDP, "ipvs-udp-timeout", 0, "ipvs mode: timeout of IPVS UDP flows (0 = leave the kernel's)")
	fs.StringVar(&eb.pinRoot, "bpf-pin-dir", ebpf.DefaultPinRoot, "ebpf mode: directory on a bpf filesystem for the pinned maps and links (ipv4/, ipv6/ below it)")
	fs.StringVar(&eb.cgroup, "cgroup-path", "", "ebpf mode: cgroup v2 directory whose processes' sockets are load-balanced (default: the cgroup v2 root, every process of the host)")
	fs.Var(&eb.tcInterfaces, "bpf-tc-interfaces", "ebpf mode: the node's external interfaces (comma-separated), where a TCX program translates NodePort, externalIP, LoadBalancer and ClusterIP traffic arriving from other hosts; \"auto\": those holding the node's addresses (its Node's InternalIP and ExternalIP, and the local addresses in --nodeport-addresses' CIDRs), chosen at start and followed while the proxy runs: a link that gains such an address is attached, one that loses it or goes away detached (default: none: only traffic from this host's sockets is load-balanced)")
	fs.BoolVar(&dump, "dump", false, "ebpf mode: print the pinned service and backend tables and exit")
	logs.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := logs.Logger("proxy")
	if err != nil {
		return err
	}
	o.Core.Logger = log
	o.Families = familiesOf(o.Core.ClusterCIDRs)
	modes := modesFor(log, eb, ipvsCfg)
	if dump {
		if o.Mode != "ebpf" {
			return fmt.Errorf("--dump: only --proxy-mode=ebpf has tables to dump (the others: iptables-save, nft list table)")
		}
		return dumpEBPF(os.Stdout, eb.root())
	}
	if cleanup {
		return modes.CleanupAll(ctx, "", []proxy.Family{proxy.IPv4, proxy.IPv6}, log)
	}
	if err := errors.Join(modes.Check(o.Mode), o.Validate(), ipvsCfg.Validate(), eb.validate()); err != nil {
		return err
	}
	if o.Mode == "ebpf" {
		if err := eb.preflight(); err != nil {
			return err
		}
	}
	if o.Core.NodeName, err = cli.NodeName(hostname); err != nil {
		return err
	}
	o.Core.LocalAddrs = localAddrs
	o.Core.Conntrack = proxy.NetlinkConntrack{}
	client, err := cli.NodeClient(kubeconfig, Component)
	if err != nil {
		return err
	}
	if o.Mode == "ebpf" && eb.tcAuto() {
		if eb.tcInterfaces, eb.follow, err = autoTCInterfaces(ctx, client, o.Core.NodeName, o.Core.NodePortAddresses); err != nil {
			return fmt.Errorf("--bpf-tc-interfaces=%s: %w", ebpf.AutoInterfaces, err)
		}
		log.Info("tc interfaces chosen for the node's addresses (followed as addresses change)", "interfaces", eb.tcInterfaces)
		modes = modesFor(log, eb, ipvsCfg)
	}
	return app.Run(ctx, o, modes, client)
}

// DefaultModes is the --proxy-mode switch with every mode's defaults:
// enough to check a mode's name and availability and to clean up a
// default install (nodenet cleanup, up and manifest use it).
func DefaultModes(log *slog.Logger) app.Modes { return modesFor(log, ebpfFlags{}, ipvs.Config{}) }

// modesFor is the explicit --proxy-mode switch of this build; eb and
// ipvsCfg configure the ebpf and ipvs modes.
func modesFor(log *slog.Logger, eb ebpfFlags, ipvsCfg ipvs.Config) app.Modes {
	return app.Modes{
		"iptables": {
			New: func(ctx context.Context, f proxy.Family) (proxy.DataPlane, error) {
				r, err := ipt.Open(ctx, ipt.Direct, ipt.Family(f))
				if err != nil {
					return nil, err
				}
				log.Info("iptables backend", "family", f, "variant", r.Backend())
				return iptables.New(f, r, log), nil
			},
			Cleanup: func(ctx context.Context, f proxy.Family) error {
				var errs []error
				for _, b := range ipt.Backends {
					if err := iptables.New(f, ipt.New(ipt.Direct, ipt.Family(f), b), log).Cleanup(ctx); err != nil {
						errs = append(errs, err)
					}
				}
				return errors.Join(errs...)
			},
		},
		"nftables": {
			New: func(ctx context.Context, f proxy.Family) (proxy.DataPlane, error) {
				// The data plane, and so its runner's netlink socket,
				// lives as long as the process.
				return nftables.New(f, &nftables.ExecRunner{}, log), nil
			},
			Cleanup: func(ctx context.Context, f proxy.Family) error {
				r := &nftables.ExecRunner{}
				defer r.Close()
				return nftables.New(f, r, log).Cleanup(ctx)
			},
		},
		"ipvs": {
			New: func(ctx context.Context, f proxy.Family) (proxy.DataPlane, error) {
				// A kernel without IPVS fails here, clearly, before
				// anything is programmed.
				h, err := ipvs.Open("")
				if err != nil {
					return nil, err
				}
				return ipvs.New(f, h, ipvs.NetHost{}, ipvsCfg, log), nil
			},
			Cleanup: func(ctx context.Context, f proxy.Family) error {
				return ipvs.CleanupNetns(ctx, f, "", log)
			},
			Available: ipvs.Probe,
		},
		"ebpf": {
			New: func(ctx context.Context, f proxy.Family) (proxy.DataPlane, error) {
				cg, err := eb.cgroupPath()
				if err != nil {
					return nil, err
				}
				return ebpf.New(ebpf.Config{Family: f, Cgroup: cg, RootCgroupOK: true,
					PinDir: ebpf.FamilyPinDir(eb.root(), f), Log: log, Interfaces: eb.tcInterfaces, FollowNode: eb.follow}), nil
			},
			Cleanup: func(ctx context.Context, f proxy.Family) error {
				if err := ebpf.New(ebpf.Config{Family: f, PinDir: ebpf.FamilyPinDir(eb.root(), f), Log: log}).Cleanup(ctx); err != nil {
					return err
				}
				// The root goes with the last family (ENOTEMPTY until then).
				_ = os.Remove(eb.root())
				return nil
			},
		},
	}
}

// ebpfFlags place the ebpf mode: where its pins live and which cgroup's
// sockets it translates.
type ebpfFlags struct {
	pinRoot, cgroup string
	// tcInterfaces get the tc path (proxy/ebpf's Config.Interfaces).
	tcInterfaces cli.StringList
	// follow is what --bpf-tc-interfaces=auto keeps choosing by once the
	// proxy runs (Config.FollowNode); nil for an explicit list.
	follow *ebpf.NodeAddrChoice
}

// tcAuto reports --bpf-tc-interfaces=auto.
func (eb ebpfFlags) tcAuto() bool { return slices.Contains(eb.tcInterfaces, ebpf.AutoInterfaces) }

func (eb ebpfFlags) validate() error {
	if eb.tcAuto() && len(eb.tcInterfaces) > 1 {
		return fmt.Errorf("--bpf-tc-interfaces %s: %q chooses every interface, name none beside it", eb.tcInterfaces.String(), ebpf.AutoInterfaces)
	}
	return nil
}

// autoTCInterfaces chooses the tc interfaces of --bpf-tc-interfaces=auto:
// the links holding the node's addresses; the choice it returns is what
// the data plane keeps following as addresses change. The Node is listed by name (the
// proxy's role may list and watch nodes, as kube-proxy's, not get them)
// and waited for 20s: the proxy may start before its agent registered it,
// and its liveness probe is not served until the data plane runs.
func autoTCInterfaces(ctx context.Context, client kubernetes.Interface, nodeName string, npa proxy.NodePortAddresses) ([]string, *ebpf.NodeAddrChoice, error) {
	var node *corev1.Node
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", nodeName).String()})
		switch {
		case err != nil:
			last = err
		case len(l.Items) == 0:
			last = errors.New("no such Node yet")
		default:
			node = &l.Items[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read Node %s for its addresses: %w", nodeName, errors.Join(err, last))
	}
	local, err := localAddrs()
	if err != nil {
		return nil, nil, err
	}
	ifaces, err := ebpf.NodeInterfaces(tcNodeAddrs(node, npa, local))
	if err != nil {
		return nil, nil, err
	}
	return ifaces, &ebpf.NodeAddrChoice{NodeAddrs: tcNodeAddrs(node, proxy.NodePortAddresses{}, nil), CIDRs: npa.CIDRs}, nil
}

// tcNodeAddrs are the addresses whose interfaces get the tc path: the
// Node's InternalIP and ExternalIP addresses, and the local addresses in
// --nodeport-addresses' CIDRs (where NodePorts are served).
func tcNodeAddrs(node *corev1.Node, npa proxy.NodePortAddresses, local []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	for _, a := range local {
		if slices.ContainsFunc(npa.CIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func (eb ebpfFlags) root() string { return cmp.Or(eb.pinRoot, ebpf.DefaultPinRoot) }

// cgroupPath is --cgroup-path (its unified/ on a hybrid host), else the
// cgroup v2 hierarchy's root: on a real node every process's sockets are
// translated, as with Cilium's socket LB. The local cluster gives each
// node's proxy its node's cgroup.
func (eb ebpfFlags) cgroupPath() (string, error) {
	if eb.cgroup != "" {
		return cgroup2.Resolve(eb.cgroup)
	}
	mnt, err := cgroup2.Mount()
	if err != nil {
		return "", fmt.Errorf("--cgroup-path not set: %w", err)
	}
	return mnt, nil
}

// preflight fails the start of the ebpf mode with one clear error when the
// machine lacks what it needs (bpffs at the pin root, a cgroup v2
// directory); a verifier rejection is reported by the first sync.
func (eb ebpfFlags) preflight() error {
	cg, err := eb.cgroupPath()
	if err != nil {
		return err
	}
	if err := ebpf.Preflight(eb.root(), cg, true); err != nil {
		return fmt.Errorf("--proxy-mode=ebpf: %w", err)
	}
	return nil
}

// dumpEBPF prints the service table of each family pinned below pinRoot.
func dumpEBPF(w io.Writer, pinRoot string) error {
	found := false
	for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		dir := ebpf.FamilyPinDir(pinRoot, f)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		found = true
		table, err := ebpf.DumpPinned(dir, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "# %s (%s)\n", f, dir)
		if table != "" {
			fmt.Fprintln(w, table)
		}
	}
	if !found {
		return fmt.Errorf("--dump: nothing pinned below %s (no ebpf proxy ran with this --bpf-pin-dir)", pinRoot)
	}
	return nil
}

// NodePortFlag is --nodeport-addresses: CIDRs (cidrlist.Any) and the word
// "primary" (the node's IPs from its Node object), comma-separated and
// repeatable, as kube-proxy takes them.
type NodePortFlag struct{ Dst *proxy.NodePortAddresses }

func (f *NodePortFlag) String() string {
	if f == nil || f.Dst == nil {
		return ""
	}
	return f.Dst.String()
}

func (f *NodePortFlag) Set(v string) error {
	var cidrs []string
	for s := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(s), "primary") {
			f.Dst.Primary = true
			continue
		}
		cidrs = append(cidrs, s)
	}
	ps, err := cidrlist.Parse(cidrs, cidrlist.Any)
	if err != nil {
		return fmt.Errorf(`%w (want CIDRs or "primary")`, err)
	}
	f.Dst.CIDRs = append(f.Dst.CIDRs, ps...)
	return nil
}

func familiesOf(cidrs []netip.Prefix) []proxy.Family {
	var v4, v6 bool
	for _, p := range cidrs {
		v4 = v4 || p.Addr().Is4()
		v6 = v6 || p.Addr().Is6()
	}
	switch {
	case v4 && v6:
		return []proxy.Family{proxy.IPv4, proxy.IPv6}
	case v6:
		return []proxy.Family{proxy.IPv6}
	}
	return []proxy.Family{proxy.IPv4}
}

func localAddrs() ([]netip.Addr, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
