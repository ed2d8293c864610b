package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nodenet/nodenet/daemonset/manifest"
	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/subnetenv"
)

// runFlanneld is `nodenet flanneld`: upstream flanneld's flags, plus lease
// mode, the masquerade backend, CNI conf install and --netns.
func runFlanneld(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("flanneld", flag.ContinueOnError)
	var (
		o                                flanneld.Options
		kubeSubnetMgr                    bool
		kubeconfig, publicIP, publicIPv6 string
		canReach                         string
		ifaces                           cli.StringList
		healthzIP, cniTemplatePath       string
		healthzPort, metricsPort         int
		netns                            string
		cleanup                          bool
		logs                             cli.LogFlags
	)
	fs.BoolVar(&kubeSubnetMgr, "kube-subnet-mgr", false, "take the node subnet from node.spec.podCIDRs (kube subnet manager)")
	fs.BoolVar(&o.SubnetLease, "subnet-lease", false, "lease the node subnet from Network through coordination.k8s.io Leases (no node IPAM controller needed)")
	fs.StringVar(&o.Lease.Namespace, "subnet-lease-namespace", "kube-system", "namespace of the subnet Leases (created if missing)")
	fs.DurationVar(&o.Lease.TTL, "subnet-lease-ttl", 24*time.Hour, "lifetime of a subnet lease without renewal")
	fs.DurationVar(&o.Lease.RenewMargin, "subnet-lease-renew-margin", time.Hour, "renew a subnet lease this long before it expires")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.Var(&ifaces, "iface", "interface (name or IP) for inter-node traffic; repeatable, first match wins")
	fs.Var(&regexpList{&o.Iface.IfaceRegex}, "iface-regex", "regex matched against interface names and addresses; repeatable")
	fs.StringVar(&canReach, "iface-can-reach", "", "use the interface of the route to this IP")
	fs.StringVar(&publicIP, "public-ip", "", "IPv4 address other nodes use to reach this one (default: the interface's)")
	fs.StringVar(&publicIPv6, "public-ipv6", "", "IPv6 address other nodes use to reach this one")
	fs.BoolVar(&o.IPMasq, "ip-masq", false, "masquerade traffic from pods to outside the cluster network")
	fs.StringVar(&o.MasqBackend, "masq-backend", "", "iptables or nftables (default: nftables if net-conf.json has EnableNFTables, else iptables)")
	fs.DurationVar(&o.IPTablesResync, "iptables-resync", 5*time.Second, "how often the masquerade (and vxlan notrack) rules are checked and repaired")
	fs.BoolVar(&o.VXLANNoTrack, "vxlan-notrack", true, "vxlan backend: exempt the tunnel's own UDP packets (this node's VTEP address and the VXLAN port) from connection tracking in the raw table, through the --masq-backend; a firewall that accepts only tracked ESTABLISHED traffic then needs a rule for the VXLAN port")
	fs.StringVar(&o.SubnetFile, "subnet-file", subnetenv.DefaultPath, "where to write subnet.env")
	fs.StringVar(&o.NetConfPath, "net-config-path", manifest.NetConfPath, "net-conf.json")
	fs.StringVar(&o.InstallCNIConf, "install-cni-conf", "", "write the CNI conflist here (e.g. /etc/cni/net.d/10-nodenet.conflist) once subnet.env exists")
	fs.StringVar(&cniTemplatePath, "cni-conf-template", "", "text/template file for the conflist (default: nodenet CNI plugin + portmap)")
	fs.StringVar(&o.HostRouting, "host-routing", flanneld.HostRoutingKernel, "how pod-to-pod packets between nodes are forwarded: kernel (routing and netfilter, as flannel) or ebpf (TCX programs on the pod veths and uplinks, past netfilter; see routes/hostrouting)")
	fs.StringVar(&o.PodBridge, "pod-bridge", flanneld.DefaultPodBridge, "the CNI plugin's bridge, whose ports --host-routing=ebpf attaches to")
	fs.BoolVar(&o.SetNodeNetworkUnavailable, "set-node-network-unavailable", true, "set the NodeNetworkUnavailable condition to False once the network is up")
	fs.StringVar(&healthzIP, "healthz-ip", "127.0.0.1", "address for /healthz, /readyz and /metrics (upstream flanneld defaults to 0.0.0.0; metrics stay on loopback unless asked)")
	fs.IntVar(&healthzPort, "healthz-port", 0, "port for /healthz, /readyz and /metrics (0 = off)")
	fs.IntVar(&metricsPort, "metrics-port", 0, "extra port serving the same endpoints (0 = off)")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", 10*time.Second, "full reconcile of routes, neighbours and FDB entries at least this often")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", 100*time.Millisecond, "at most one reconcile per this period when nodes change")
	fs.StringVar(&o.VXLANTxChecksumOffload, "vxlan-tx-checksum-offload", "", "TX checksum offload on the vxlan devices: auto (on unless a start-up self-test shows this kernel corrupts NATed VXLAN checksums), on, off (default: net-conf.json's Backend.TxChecksumOffload, else auto)")
	fs.StringVar(&netns, "netns", "", "network namespace to program (name or path; default: our own)")
	fs.BoolVar(&cleanup, "cleanup", false, "remove what flanneld put on this node (routes, vxlan devices, masquerade rules, --subnet-file, --install-cni-conf) and exit")
	logs.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if cleanup {
		log, err := logs.Logger("flanneld")
		if err != nil {
			return err
		}
		return runFlanneldCleanup(ctx, flanneld.CleanupOptions{Netns: flanneld.Netns(netns), NetConfPath: o.NetConfPath,
			SubnetFile: o.SubnetFile, InstallCNIConf: o.InstallCNIConf, Logger: log})
	}
	if kubeSubnetMgr == o.SubnetLease {
		return errors.New("choose exactly one of --kube-subnet-mgr and --subnet-lease")
	}
	log, err := logs.Logger("flanneld")
	if err != nil {
		return err
	}
	if o.Iface.PublicIP, err = optionalAddr("--public-ip", publicIP); err != nil {
		return err
	}
	if o.Iface.PublicIPv6, err = optionalAddr("--public-ipv6", publicIPv6); err != nil {
		return err
	}
	if o.Iface.CanReach, err = optionalAddr("--iface-can-reach", canReach); err != nil {
		return err
	}
	if cniTemplatePath != "" {
		b, err := os.ReadFile(cniTemplatePath)
		if err != nil {
			return fmt.Errorf("--cni-conf-template: %w", err)
		}
		o.CNIConfTemplate = string(b)
	}
	o.Iface.Ifaces, o.Netns, o.Logger = ifaces, flanneld.Netns(netns), log
	// A bad net-conf.json is reported before anything else is tried.
	if _, err := flanneld.LoadConfig(o.NetConfPath); err != nil {
		return err
	}
	if o.Client, err = cli.NodeClient(kubeconfig, component()); err != nil {
		return err
	}
	d, err := flanneld.New(o)
	if err != nil {
		return err
	}
	for _, port := range uniquePorts(healthzPort, metricsPort) {
		if err := serve(ctx, net.JoinHostPort(healthzIP, strconv.Itoa(port)), d.Handler()); err != nil {
			return err
		}
	}
	return d.Run(ctx)
}

func optionalAddr(flagName, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%s %q: not an IP address", flagName, s)
	}
	return a, nil
}

// regexpList is a repeatable, comma-separable regular-expression flag (as
// cli.StringList splits it), compiled as it is set so a bad expression fails
// flag parsing.
type regexpList struct{ dst *[]*regexp.Regexp }

func (l *regexpList) String() string {
	if l == nil || l.dst == nil {
		return ""
	}
	s := make([]string, len(*l.dst))
	for i, re := range *l.dst {
		s[i] = re.String()
	}
	return strings.Join(s, ",")
}

func (l *regexpList) Set(v string) error {
	var exprs cli.StringList
	_ = exprs.Set(v)
	for _, expr := range exprs {
		re, err := regexp.Compile(expr)
		if err != nil {
			return err
		}
		*l.dst = append(*l.dst, re)
	}
	return nil
}

func uniquePorts(ports ...int) []int {
	var out []int
	for _, p := range ports {
		if p > 0 && (len(out) == 0 || out[0] != p) {
			out = append(out, p)
		}
	}
	return out
}

// serve listens now (so a taken port fails the start) and serves until ctx
// ends.
func serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	return nil
}
