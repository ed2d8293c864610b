package flanneld

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"

	"github.com/vishvananda/netlink"
)

// flannelVXLANName matches the names flannel gives its vxlan devices
// (flannel.<VNI>, flannel-v6.<VNI>): upstream's and ours are the same.
var flannelVXLANName = regexp.MustCompile(`^flannel(-v6)?\.[0-9]+$`)

// wantedDevices are the vxlan devices cfg's backend runs on: none unless
// the backend is vxlan, then one per enabled family.
func wantedDevices(cfg *Config) []string {
	if cfg.Backend.Type != BackendVXLAN {
		return nil
	}
	var out []string
	if cfg.EnableIPv4 {
		out = append(out, vxlanDevName(cfg.Backend.VNI, true))
	}
	if cfg.EnableIPv6 {
		out = append(out, vxlanDevName(cfg.Backend.VNI, false))
	}
	return out
}

// removeStaleDevices deletes flannel's vxlan devices that this
// configuration does not use: what a run with another backend, VNI or set
// of IP families left behind. A device takes its neighbours, FDB entries
// and routes with it, so a node switched to host-gw or alloc keeps no path
// through the overlay and no route to a peer through it. Stale owned
// routes outside a device are the backend's Sync's to remove.
func removeStaleDevices(ns Netns, cfg *Config, log *slog.Logger) error {
	h, err := ns.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list links in netns %s: %w", ns, err)
	}
	keep := wantedDevices(cfg)
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		if _, ok := l.(*netlink.Vxlan); !ok || !flannelVXLANName.MatchString(name) || slices.Contains(keep, name) {
			continue
		}
		if err := h.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete stale vxlan device %s: %w", name, err))
			continue
		}
		log.Info("removed the vxlan device of an earlier configuration", "dev", name, "backend", cfg.Backend.Type)
	}
	return errors.Join(errs...)
}
