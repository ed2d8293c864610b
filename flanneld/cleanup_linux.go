package flanneld

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"regexp"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/routes"
	"github.com/nodenet/nodenet/subnetenv"
)

// CleanupOptions say where a flanneld kept its state: the same paths its
// Options name. Only SubnetFile is needed; net-conf.json, when it can be
// read, narrows the vxlan devices to its VNI.
type CleanupOptions struct {
	Netns          Netns
	NetConfPath    string
	SubnetFile     string
	InstallCNIConf string // "" = no conflist was installed
	Logger         *slog.Logger
}

// Cleanup removes what a flanneld put on its node, in the reverse order
// of a Daemon's start: the CNI conflist (so the runtime stops calling the
// plugin), the routes to other nodes' subnets, the vxlan devices (and with
// them their neighbour and FDB entries), the masquerade rules of both
// backends (iptables through nft and legacy, nftables), subnet.env. It
// removes only what is provably flanneld's, by the marks a running daemon
// itself goes by: routes of routes.ProtocolNodenet inside the cluster
// networks (what a daemon with no peers would delete), vxlan devices named
// flannel.<VNI> / flannel-v6.<VNI>, our own chains and tables. It tries
// every step, reports each object it removed (also logged) and returns the
// joined errors of the steps that failed. Nothing left is success, so a
// second run removes nothing and returns nil.
func Cleanup(ctx context.Context, o CleanupOptions) ([]string, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SubnetFile == "" {
		o.SubnetFile = subnetenv.DefaultPath
	}
	c := &cleaner{o: o, log: o.Logger}
	cfg := c.config()
	var errs []error
	if o.InstallCNIConf != "" {
		errs = append(errs, c.removeFile("CNI conflist", o.InstallCNIConf))
	}
	errs = append(errs, c.routes(ctx, cfg), c.devices(ctx, cfg), c.masquerade(ctx))
	errs = append(errs, c.removeFile("subnet.env", o.SubnetFile))
	return c.removed, errors.Join(errs...)
}

// cleaner accumulates what one Cleanup removed.
type cleaner struct {
	o       CleanupOptions
	log     *slog.Logger
	removed []string
}

func (c *cleaner) report(what string) {
	c.removed = append(c.removed, what)
	c.log.Info("removed", "object", what, "netns", c.o.Netns)
}

// cleanupConfig is what Cleanup knows of the daemon's configuration.
type cleanupConfig struct {
	networks []netip.Prefix
	vni      int // 0: unknown, any flannel.<n> vxlan device
}

// config reads net-conf.json, else the networks subnet.env names. An
// unreadable net-conf.json is no error: an uninstall often runs after its
// ConfigMap is gone.
func (c *cleaner) config() cleanupConfig {
	var cc cleanupConfig
	if c.o.NetConfPath != "" {
		cfg, err := LoadConfig(c.o.NetConfPath)
		if err == nil {
			cc.networks = cfg.Networks()
			if cfg.Backend.Type == BackendVXLAN {
				cc.vni = cfg.Backend.VNI
			}
			return cc
		}
		c.log.Info("net-conf.json not used; taking the cluster networks from subnet.env", "err", err)
	}
	env, err := subnetenv.Read(c.o.SubnetFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("read subnet.env", "err", err)
		}
		return cc
	}
	for _, nw := range []netip.Prefix{env.Network, env.IPv6Network} {
		if nw.IsValid() {
			cc.networks = append(cc.networks, nw.Masked())
		}
	}
	return cc
}

func (c *cleaner) removeFile(what, path string) error {
	err := os.Remove(path)
	switch {
	case err == nil:
		c.report(what + " " + path)
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return fmt.Errorf("remove %s: %w", what, err)
}

// routes removes the routes a running daemon would call its own. Without
// the cluster networks nothing proves a nodenet-protocol route is
// flanneld's (the cloud-routes controller marks its routes alike), so
// they stay and are named in the log.
func (c *cleaner) routes(ctx context.Context, cfg cleanupConfig) error {
	t, err := routes.NewNetlinkTable(string(c.o.Netns), 0, routes.ProtocolNodenet)
	if err != nil {
		return fmt.Errorf("clean up routes: %w", err)
	}
	defer t.Close()
	if len(cfg.networks) == 0 {
		if left, err := t.List(ctx); err == nil && len(left) > 0 {
			c.log.Warn("cluster networks unknown (no net-conf.json, no subnet.env): routes of protocol nodenet left alone", "routes", fmt.Sprint(left))
		}
		return nil
	}
	rs := routeSync{table: t, networks: cfg.networks}
	owned, err := rs.owned(ctx)
	if err != nil {
		return fmt.Errorf("clean up routes: %w", err)
	}
	if err := rs.apply(ctx, nil); err != nil {
		return fmt.Errorf("clean up routes: %w", err)
	}
	for _, r := range owned {
		c.report("route " + r.String())
	}
	return nil
}

// vxlanName matches the devices the vxlan backend creates (vxlanDevName).
var vxlanName = regexp.MustCompile(`^flannel(-v6)?\.([0-9]+)$`)

// devices deletes our vxlan devices; the kernel takes their neighbour and
// FDB entries and the routes through them along.
func (c *cleaner) devices(ctx context.Context, cfg cleanupConfig) error {
	h, err := c.o.Netns.Handle()
	if err != nil {
		return fmt.Errorf("clean up vxlan devices: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("clean up vxlan devices: list links: %w", err)
	}
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		if !c.ownDevice(l, cfg.vni) {
			continue
		}
		entries := c.countEntries(ctx, name)
		if err := h.LinkDel(l); err != nil {
			var notFound netlink.LinkNotFoundError
			if !errors.As(err, &notFound) {
				errs = append(errs, fmt.Errorf("delete vxlan %s: %w", name, err))
			}
			continue
		}
		c.report("vxlan device " + name + entries)
	}
	return errors.Join(errs...)
}

func (c *cleaner) ownDevice(l netlink.Link, vni int) bool {
	m := vxlanName.FindStringSubmatch(l.Attrs().Name)
	if m == nil || l.Type() != "vxlan" {
		return false
	}
	return vni == 0 || m[0] == vxlanDevName(vni, m[1] == "")
}

// countEntries says how many neighbour and FDB entries go with a device,
// for the report.
func (c *cleaner) countEntries(ctx context.Context, dev string) string {
	var n, f int
	if t, err := routes.NewNeighTable(string(c.o.Netns), dev); err == nil {
		l, _ := t.List(ctx)
		n = len(l)
		t.Close()
	}
	if t, err := routes.NewFDBTable(string(c.o.Netns), dev); err == nil {
		l, _ := t.List(ctx)
		f = len(l)
		t.Close()
	}
	return fmt.Sprintf(" (with %d neighbour and %d FDB entries)", n, f)
}

// masquerade removes the masquerade and vxlan notrack rules of both
// backends, through both iptables backends, in both families: the
// daemon's options at the time are unknown, and its Cleanup is what
// switching backends uses too.
func (c *cleaner) masquerade(ctx context.Context) error {
	var errs []error
	for _, b := range iptables.Backends {
		ipt := newIPTablesMasq(fixedIPTables(c.o.Netns, b), nil)
		for _, r := range []ruleSet{{kind: "masquerade", rules: ipt}, {kind: "vxlan notrack", rules: newIPTablesNoTrack(ipt, nil)}} {
			what := r.kind
			removed, err := r.rules.Cleanup(ctx)
			for _, r := range removed {
				c.report(fmt.Sprintf("iptables-%s %s", b, r))
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("clean up iptables-%s %s rules: %w", b, what, err))
			}
		}
	}
	for _, t := range []*nftTables{newNFTMasq(c.o.Netns, nil), newNFTNoTrack(c.o.Netns, nil)} {
		removed, err := t.Cleanup(ctx)
		for _, r := range removed {
			c.report(r)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
