package flanneld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/internal/periodic"
	"github.com/nodenet/nodenet/subnetenv"
)

// Options configures a Daemon; cmd/nodenet fills it from flags.
type Options struct {
	// NodeName is this node's name: the Node object in kube mode, the
	// lease holder in lease mode.
	NodeName string
	Client   kubernetes.Interface
	// Netns is where the kernel state goes; "" = our own namespace.
	Netns Netns
	// NetConfPath is net-conf.json.
	NetConfPath string
	// SubnetLease selects lease mode; otherwise kube mode.
	SubnetLease bool
	Lease       LeaseOptions
	Iface       IfaceOptions
	// IPMasq installs the masquerade rules; MasqBackend is iptables or
	// nftables ("" = nftables if net-conf.json says EnableNFTables).
	IPMasq         bool
	MasqBackend    string
	IPTablesResync time.Duration
	// VXLANNoTrack exempts the VXLAN tunnel's own packets from connection
	// tracking (notrack.go), in the masquerade rules' backend.
	VXLANNoTrack bool
	SubnetFile   string
	// InstallCNIConf, when set, is where the CNI conflist goes, rendered
	// from CNIConfTemplate (default DefaultCNIConfTemplate).
	InstallCNIConf  string
	CNIConfTemplate string
	// VXLANTxChecksumOffload overrides net-conf.json's
	// Backend.TxChecksumOffload on this node (auto, on, off; "" = keep).
	VXLANTxChecksumOffload string
	// HostRouting is how pod-to-pod packets between nodes are forwarded:
	// HostRoutingKernel (the kernel's routing and netfilter, as upstream
	// flannel; "" means this) or HostRoutingEBPF (routes/hostrouting:
	// TCX programs on the pod veths and the uplinks, past netfilter).
	HostRouting string
	// PodBridge is the CNI plugin's bridge (default cni0), whose ports
	// the eBPF host routing attaches to.
	PodBridge string
	// SetNodeNetworkUnavailable sets NodeNetworkUnavailable=False once up.
	SetNodeNetworkUnavailable bool
	// ResyncPeriod bounds how long a drifted route goes unnoticed;
	// MinSyncPeriod rate-limits syncs triggered by events.
	ResyncPeriod, MinSyncPeriod time.Duration
	Logger                      *slog.Logger
}

// Daemon is one flanneld. New checks everything that can be checked
// without the kernel; Run does the rest.
type Daemon struct {
	opts    Options
	cfg     *Config
	cniTmpl *template.Template
	log     *slog.Logger
	m       *metrics
	txCsum  *prometheus.GaugeVec
	sync    *runner
	// iptables opens the masquerade rules' iptables runner of a family;
	// tests replace it with a Fake.
	iptables openIPTables

	mu     sync.Mutex
	status string // why not ready; "" = ready
}

// New validates opts and net-conf.json. Its errors mean "fix the config":
// nothing has been touched.
func New(opts Options) (*Daemon, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.NodeName == "" {
		return nil, errors.New("node name is required (--node-name or NODE_NAME)")
	}
	if opts.Client == nil {
		return nil, errors.New("no API client")
	}
	if opts.SubnetFile == "" {
		opts.SubnetFile = subnetenv.DefaultPath
	}
	if opts.IPTablesResync <= 0 {
		opts.IPTablesResync = 5 * time.Second
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = 10 * time.Second
	}
	if opts.MinSyncPeriod < 0 {
		opts.MinSyncPeriod = 0
	}
	cfg, err := LoadConfig(opts.NetConfPath)
	if err != nil {
		return nil, err
	}
	switch opts.MasqBackend {
	case "":
		opts.MasqBackend = MasqIPTables
		if cfg.EnableNFTables {
			opts.MasqBackend = MasqNFTables
		}
	case MasqIPTables, MasqNFTables:
	default:
		return nil, fmt.Errorf("--masq-backend %q: want iptables or nftables", opts.MasqBackend)
	}
	switch opts.HostRouting {
	case "":
		opts.HostRouting = HostRoutingKernel
	case HostRoutingKernel, HostRoutingEBPF:
	default:
		return nil, fmt.Errorf("--host-routing %q: want %s or %s", opts.HostRouting, HostRoutingKernel, HostRoutingEBPF)
	}
	if opts.PodBridge == "" {
		opts.PodBridge = DefaultPodBridge
	}
	if opts.Iface.PublicIP.IsValid() && !opts.Iface.PublicIP.Is4() {
		return nil, fmt.Errorf("--public-ip %s: not an IPv4 address", opts.Iface.PublicIP)
	}
	if opts.Iface.PublicIPv6.IsValid() && !opts.Iface.PublicIPv6.Is6() {
		return nil, fmt.Errorf("--public-ipv6 %s: not an IPv6 address", opts.Iface.PublicIPv6)
	}
	if opts.VXLANTxChecksumOffload != "" {
		v, err := ParseTxChecksumOffload(opts.VXLANTxChecksumOffload)
		if err != nil {
			return nil, fmt.Errorf("--vxlan-tx-checksum-offload %w", err)
		}
		if cfg.Backend.Type == BackendVXLAN {
			cfg.Backend.TxChecksumOffload = v
		}
	}
	opts.Iface.IPv4, opts.Iface.IPv6 = cfg.EnableIPv4, cfg.EnableIPv6
	d := &Daemon{opts: opts, cfg: cfg, log: opts.Logger, m: newMetrics(), txCsum: newTxCsumGauge(), status: "starting",
		sync: newRunner(opts.MinSyncPeriod, opts.ResyncPeriod), iptables: detectIPTables(opts.Netns, opts.Logger)}
	d.m.reg.MustRegister(d.txCsum)
	if opts.InstallCNIConf != "" {
		if d.cniTmpl, err = parseCNITemplate(opts.CNIConfTemplate); err != nil {
			return nil, err
		}
	}
	if len(cfg.Unknown) > 0 {
		d.log.Warn("net-conf.json has keys flannel does not define; ignored", "keys", cfg.Unknown)
	}
	return d, nil
}

// LoadConfig reads and validates net-conf.json at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read net-conf.json (--net-config-path): %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Config returns the validated net-conf.json.
func (d *Daemon) Config() *Config { return d.cfg }

func (d *Daemon) setStatus(s string) {
	d.mu.Lock()
	d.status = s
	d.mu.Unlock()
	if s == "" {
		d.m.ready.Set(1)
	} else {
		d.m.ready.Set(0)
	}
}

// Ready reports whether subnet.env, routes and masquerade rules are in
// place, and if not, why.
func (d *Daemon) Ready() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status == "", d.status
}

// Handler serves /healthz and /readyz as upstream flanneld does on
// --healthz-ip:--healthz-port (/healthz: 200 "flanneld is running" for as
// long as the process serves; /readyz: 200 "flanneld is ready" or 503
// "flanneld is not ready yet", to which nodenet appends the reason), and
// /metrics.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "flanneld is running")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := d.Ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "flanneld is not ready yet: "+why)
			return
		}
		_, _ = io.WriteString(w, "flanneld is ready")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(d.m.reg, promhttp.HandlerOpts{}))
	return mux
}

// subnetManager is what the daemon needs from kube mode and lease mode.
type subnetManager interface {
	Start(ctx context.Context) error
	Stop()
	Self() selfInfo
	Acquire(ctx context.Context, attrs LocalAttrs, waiting func(string)) (Lease, error)
	Peers() []Lease
	Keep(ctx context.Context) error
	Complete(ctx context.Context) error
}

// Run brings the node's network up and keeps it converged until ctx ends.
// It returns nil on cancellation and leaves the data plane in place.
func (d *Daemon) Run(ctx context.Context) error {
	err := d.run(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err())) {
		d.log.Info("stopping; routes, devices and rules stay in place")
		return nil
	}
	return err
}

func (d *Daemon) run(ctx context.Context) error {
	ext, err := d.externalInterface()
	if err != nil {
		return err
	}
	sm := d.subnetManager()
	d.setStatus("waiting for the API server")
	if err := sm.Start(ctx); err != nil {
		return err
	}
	defer sm.Stop()
	self := sm.Self()
	if !d.opts.Iface.PublicIP.IsValid() && self.NodePublicIP.IsValid() {
		d.log.Info("public IP from node annotation", "annotation", AnnNodePublicIP, "ip", self.NodePublicIP)
		ext.PublicIP = self.NodePublicIP
	}
	if !d.opts.Iface.PublicIPv6.IsValid() && self.NodePublicIPv6.IsValid() {
		ext.PublicIPv6 = self.NodePublicIPv6
	}
	d.log.Info("external interface", "iface", ext.Name, "ip", ext.IP, "publicIP", ext.PublicIP, "publicIPv6", ext.PublicIPv6, "mtu", ext.MTU)

	if err := removeStaleDevices(d.opts.Netns, d.cfg, d.log); err != nil {
		return err
	}
	be, err := d.newBackend(ctx, ext)
	if err != nil {
		return err
	}
	defer be.Close()
	attrs, err := be.Prepare(ctx, self)
	if err != nil {
		return err
	}
	attrs.PublicIP, attrs.PublicIPv6 = ext.PublicIP, ext.PublicIPv6
	if !d.cfg.EnableIPv4 {
		attrs.PublicIP = netip.Addr{}
	}
	if !d.cfg.EnableIPv6 {
		attrs.PublicIPv6 = netip.Addr{}
	}
	d.setStatus("acquiring a subnet")
	own, err := sm.Acquire(ctx, attrs, func(why string) { d.setStatus(why) })
	if err != nil {
		return err
	}
	d.log.Info("subnet acquired", "subnet", own.Subnet, "ipv6Subnet", own.IPv6Subnet)
	mtu, err := be.Setup(ctx, own)
	if err != nil {
		return err
	}
	// Both rule sets write through one iptables runner per family, so the
	// iptables backend is detected once.
	fams := masqFamilies(d.cfg, own)
	ipt := newIPTablesMasq(d.iptables, fams)
	rules := []ruleSet{{kind: "masq", rules: d.masquerader(ctx, fams, ipt)}, {kind: "notrack", rules: d.noTracker(ctx, ext, ipt)}}
	syncFn := func(ctx context.Context) error { return d.syncPeers(ctx, be, sm) }
	d.setStatus("programming routes")
	if err := syncFn(ctx); err != nil {
		return fmt.Errorf("first sync: %w", err)
	}
	for _, r := range rules {
		if err := d.syncRules(ctx, r); err != nil {
			return err
		}
	}
	if d.opts.HostRouting == HostRoutingEBPF {
		hr, err := d.startHostRouting(ctx, ext, own)
		if err != nil {
			return err
		}
		defer hr.Close()
	}
	if err := d.publish(own, mtu); err != nil {
		return err
	}
	if d.opts.SetNodeNetworkUnavailable {
		if err := sm.Complete(ctx); err != nil {
			d.log.Warn("set NodeNetworkUnavailable=False", "err", err)
		}
	}
	d.setStatus("")
	d.log.Info("ready", "subnetFile", d.opts.SubnetFile, "mtu", mtu, "backend", d.cfg.Backend.Type)
	return d.loop(ctx, sm, rules, syncFn)
}

func (d *Daemon) externalInterface() (*ExtIface, error) {
	h, err := d.opts.Netns.Handle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	ext, err := LookupExtIface(h, d.opts.Iface)
	if err != nil {
		return nil, err
	}
	// A cluster network that overlaps the node network would make every
	// node unreachable as soon as routes go in.
	for _, nw := range d.cfg.Networks() {
		for _, c := range ext.Connected {
			if nw.Overlaps(c) {
				field := "Network"
				if nw.Addr().Is6() {
					field = "IPv6Network"
				}
				return nil, fmt.Errorf("%s: %w", d.opts.NetConfPath, cfgErr(field, "%s overlaps the node network %s on %s", nw, c, ext.Name))
			}
		}
	}
	return ext, nil
}

func (d *Daemon) subnetManager() subnetManager {
	if d.opts.SubnetLease {
		lo := d.opts.Lease
		if prev, err := subnetenv.Read(d.opts.SubnetFile); err == nil {
			lo.Previous = append(lo.Previous, prev.Subnet.Masked(), prev.IPv6Subnet.Masked())
		}
		return newLeaseManager(d.opts.Client, d.opts.NodeName, d.cfg, lo, d.sync.Nudge, d.log)
	}
	return newKubeManager(d.opts.Client, d.opts.NodeName, d.cfg, d.sync.Nudge, d.log)
}

func (d *Daemon) newBackend(ctx context.Context, ext *ExtIface) (backend, error) {
	switch d.cfg.Backend.Type {
	case BackendHostGW:
		return newHostGW(d.opts.Netns, d.cfg, ext, d.log)
	case BackendVXLAN:
		dec := decideTxChecksum(ctx, d.cfg.Backend.TxChecksumOffload, d.cfg.Backend.Port, d.log)
		return newVXLAN(d.opts.Netns, d.cfg, ext, dec, d.reportTxChecksum, d.log)
	case BackendAlloc:
		return newAlloc(d.opts.Netns, d.cfg, ext)
	}
	return nil, fmt.Errorf("backend %q", d.cfg.Backend.Type)
}

func (d *Daemon) reportTxChecksum(dec txCsumDecision) {
	d.txCsum.Reset()
	d.txCsum.WithLabelValues(dec.Mode, dec.By).Set(map[bool]float64{true: 1}[dec.On])
	d.log.Info("vxlan tx checksum offload", "on", dec.On, "mode", dec.Mode, "decidedBy", dec.By, "reason", dec.Why)
}

// masquerader returns the chosen backend (nil without --ip-masq) after
// removing what the other backend left behind: switching backends must not
// leave two sets of rules.
func (d *Daemon) masquerader(ctx context.Context, fams []masqFamily, ipt *iptablesMasq) masquerader {
	return chooseMasquerader(ctx, d.opts.IPMasq, d.opts.MasqBackend, ipt, newNFTMasq(d.opts.Netns, fams), d.log)
}

// noTracker returns the vxlan notrack rules in the masquerade rules'
// backend (nil when off or not vxlan) after removing what either backend
// holds that is not wanted: a node switched to host-gw, to the other
// backend or to --vxlan-notrack=false keeps no stale exemption.
func (d *Daemon) noTracker(ctx context.Context, ext *ExtIface, ipt *iptablesMasq) masquerader {
	var fams []noTrackFamily
	on := d.opts.VXLANNoTrack && d.cfg.Backend.Type == BackendVXLAN
	if on {
		fams = noTrackFamilies(d.cfg, ext)
	}
	return chooseMasquerader(ctx, on && len(fams) > 0, d.opts.MasqBackend,
		newIPTablesNoTrack(ipt, fams), newNFTNoTrack(d.opts.Netns, fams), d.log)
}

// chooseMasquerader returns ipt or nft as ipMasq and backend say (nil when
// ipMasq is off) after cleaning up the one not chosen.
func chooseMasquerader(ctx context.Context, ipMasq bool, backend string, ipt, nft masquerader, log *slog.Logger) masquerader {
	var stale []masquerader
	var chosen masquerader
	switch {
	case !ipMasq:
		stale = []masquerader{ipt, nft}
	case backend == MasqNFTables:
		chosen, stale = nft, []masquerader{ipt}
	default:
		chosen, stale = ipt, []masquerader{nft}
	}
	for _, s := range stale {
		if _, err := s.Cleanup(ctx); err != nil {
			log.Debug("clean up unused masquerade backend", "err", err)
		}
	}
	return chosen
}

func (d *Daemon) syncPeers(ctx context.Context, be backend, sm subnetManager) error {
	start := time.Now()
	peers := sm.Peers()
	res, err := be.Sync(ctx, peers)
	d.m.duration.Observe(time.Since(start).Seconds())
	d.m.peers.Set(float64(res.Peers))
	d.m.entries.WithLabelValues("route").Set(float64(res.Routes))
	d.m.entries.WithLabelValues("neighbour").Set(float64(res.Neighbours))
	d.m.entries.WithLabelValues("fdb").Set(float64(res.FDB))
	d.m.peerErrors.Set(float64(len(res.PeerErrors)))
	for _, pe := range res.PeerErrors {
		d.log.Warn("peer not connected", "err", pe)
	}
	if err != nil {
		d.m.errors.WithLabelValues("sync").Inc()
		d.log.Error("sync routes", "err", err)
		return err
	}
	d.log.Debug("synced", "peers", res.Peers, "routes", res.Routes, "neighbours", res.Neighbours, "fdb", res.FDB, "took", time.Since(start))
	return nil
}

// ruleSet is one set of netfilter rules the daemon keeps (nil rules: off):
// kind "masq" (the masquerade and forward rules) or "notrack" (the vxlan
// tunnel's exemption from connection tracking).
type ruleSet struct {
	kind  string
	rules masquerader
}

func (d *Daemon) syncRules(ctx context.Context, r ruleSet) error {
	if r.rules == nil {
		return nil
	}
	changed, err := r.rules.Sync(ctx)
	if err != nil {
		d.m.errors.WithLabelValues(r.kind).Inc()
		return err
	}
	if changed {
		if r.kind == "masq" {
			d.m.masqWrites.Inc()
		}
		d.log.Info("netfilter rules written", "rules", r.kind, "backend", d.opts.MasqBackend)
	}
	return nil
}

// publish writes subnet.env and then the CNI conflist: the conflist is
// what makes the runtime call the plugin, so it must never exist without
// subnet.env.
func (d *Daemon) publish(own Lease, mtu int) error {
	var nw, nw6 netip.Prefix
	if d.cfg.EnableIPv4 {
		nw = d.cfg.Network
	}
	if d.cfg.EnableIPv6 {
		nw6 = d.cfg.IPv6Network
	}
	env := subnetenv.FromSubnets(nw, own.Subnet, nw6, own.IPv6Subnet, mtu, d.opts.IPMasq)
	if err := subnetenv.Write(d.opts.SubnetFile, env); err != nil {
		return err
	}
	if d.cniTmpl == nil {
		return nil
	}
	conf, err := renderCNIConf(d.cniTmpl, newCNIConfData(d.opts.SubnetFile, d.opts.NodeName, d.cfg, own, mtu, d.opts.IPMasq))
	if err != nil {
		return err
	}
	if err := writeFileAtomic(d.opts.InstallCNIConf, conf, 0o644); err != nil {
		return fmt.Errorf("install CNI conf: %w", err)
	}
	return nil
}

// loop keeps everything converged: peers on events, on a deleted route or
// neighbour (watchKernel) and every resync, masquerade rules every
// --iptables-resync, the lease renewed.
func (d *Daemon) loop(ctx context.Context, sm subnetManager, rules []ruleSet, syncFn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.sync.Loop(ctx, func(ctx context.Context) error {
			err := syncFn(ctx)
			if err != nil {
				d.setStatus("last sync failed: " + firstLine(err))
			} else if ok, why := d.Ready(); !ok && strings.HasPrefix(why, "last sync failed") {
				d.setStatus("")
			}
			return err
		})
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.watchKernel(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("deleted routes and neighbours are repaired at the next resync only", "err", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		periodic.Every(ctx, d.opts.IPTablesResync, func(ctx context.Context) {
			for _, r := range rules {
				if err := d.syncRules(ctx, r); err != nil && ctx.Err() == nil {
					d.log.Error("sync netfilter rules", "rules", r.kind, "err", err)
				}
			}
		})
	}()
	if err := sm.Keep(ctx); err != nil {
		d.m.errors.WithLabelValues("lease").Inc()
		d.setStatus(err.Error())
		return err
	}
	return nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
