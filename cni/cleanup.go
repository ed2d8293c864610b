package cni

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// CleanupOptions name what the plugin left on a node: the network (the
// conflist's name), its bridge, host-local's data directory and where the
// plugin binary was installed under which names.
type CleanupOptions struct {
	Network string // e.g. "cbr0"
	Bridge  string // "" = DefaultBridge
	DataDir string // "" = hostlocal.DefaultDataDir
	BinDir  string // "" = leave the binaries
	Plugins []string
	// Force deletes the bridge, and the pods' veths with it, even while
	// pods are attached.
	Force  bool
	Logger *slog.Logger
}

// ErrPodsAttached: the bridge still has ports, so pods still use the
// network; their bridge and addresses were left in place.
var ErrPodsAttached = errors.New("pods still attached to the bridge")

// moduleMark is in every Go binary built from this module: the "mod" line
// of the build information the linker embeds (what `go version -m`
// prints). It is how Cleanup tells our plugin binary from another
// project's of the same name; reading it through debug/buildinfo would
// link the object-file readers into the lean plugin binary.
const moduleMark = "\nmod\tgithub.com/nodenet/nodenet\t"

// Cleanup removes what the plugin put on the node, in the calling thread's
// network namespace: veth pairs DELs left to a reaper, the bridge and the
// network's address reservations (only once no pod is attached, unless
// Force; otherwise the error is ErrPodsAttached), the network's ipMasq
// chain in both iptables backends and families, and the installed plugin
// binaries that are ours. It tries every step, reports what it removed
// and joins the errors; a second run removes nothing and returns nil.
func Cleanup(ctx context.Context, o CleanupOptions) ([]string, error) {
	if o.Bridge == "" {
		o.Bridge = DefaultBridge
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := checkName("network", o.Network); err != nil {
		return nil, err
	}
	c := &cniCleaner{log: o.Logger}
	kept, err := c.bridge(o)
	errs := []error{err}
	if !kept {
		errs = append(errs, c.store(o))
	}
	errs = append(errs, c.masq(ctx, o.Network))
	for _, name := range o.Plugins {
		if o.BinDir != "" {
			errs = append(errs, c.binary(filepath.Join(o.BinDir, name)))
		}
	}
	return c.removed, errors.Join(errs...)
}

type cniCleaner struct {
	log     *slog.Logger
	removed []string
}

func (c *cniCleaner) report(what string) {
	c.removed = append(c.removed, what)
	c.log.Info("removed", "object", what)
}

func checkName(what, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%s %q: want a file name", what, name)
	}
	return nil
}

// bridge reaps cut-off veths, then deletes the bridge when no port is
// left on it, or with Force after deleting our pods' veths (ports that are
// not ours are only detached). kept says the bridge stays because pods use
// it.
func (c *cniCleaner) bridge(o CleanupOptions) (kept bool, err error) {
	if err := ReapDoomed(); err != nil {
		return false, err
	}
	hc, err := kernel.Dial()
	if err != nil {
		return false, fmt.Errorf("clean up bridge: %w", err)
	}
	defer hc.Close()
	br, err := hc.Link(o.Bridge)
	if kernel.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up bridge %s: %w", o.Bridge, err)
	}
	if br.Kind != "bridge" {
		return true, fmt.Errorf("%s is a %s, not our bridge: left alone", o.Bridge, br.Kind)
	}
	ports, err := portsOf(hc, br.Index)
	if err != nil {
		return false, err
	}
	if len(ports) > 0 && !o.Force {
		return true, fmt.Errorf("bridge %s has ports %s: %w; delete the pods first, or force", o.Bridge, strings.Join(ports, ","), ErrPodsAttached)
	}
	if len(ports) > 0 {
		veths, err := gcVeths(o.Network, nil)
		for _, v := range veths {
			c.report("pod veth " + v)
		}
		if err != nil {
			return false, fmt.Errorf("delete pod veths: %w", err)
		}
	}
	if err := hc.DeleteLink(br.Index); err != nil && !kernel.IsNotFound(err) {
		return false, fmt.Errorf("delete bridge %s: %w", o.Bridge, err)
	}
	c.report("bridge " + o.Bridge)
	return false, nil
}

func portsOf(hc *kernel.Conn, bridge int) ([]string, error) {
	links, err := hc.Links()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var ports []string
	for _, l := range links {
		if l.Master == bridge {
			ports = append(ports, l.Name)
		}
	}
	return ports, nil
}

// store removes the network's address reservations (host-local's
// directory of it).
func (c *cniCleaner) store(o CleanupOptions) error {
	dataDir := o.DataDir
	if dataDir == "" {
		dataDir = hostlocal.DefaultDataDir
	}
	dir := filepath.Join(dataDir, o.Network)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove address reservations: %w", err)
	}
	c.report("address reservations " + dir)
	return nil
}

// masq removes the network's ipMasq chain and the jumps to it wherever
// they are: the backend that held them when the pods were added may not
// be the one Detect picks today.
func (c *cniCleaner) masq(ctx context.Context, network string) error {
	chain := masqChain(network)
	var errs []error
	for _, b := range iptables.Backends {
		for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
			r := iptables.New(iptables.Direct, fam, b)
			n, err := removeChain(ctx, r, chain)
			switch {
			case errors.Is(err, iptables.ErrNotInstalled):
			case err != nil:
				errs = append(errs, fmt.Errorf("remove ipMasq chain %s (iptables-%s %s): %w", chain, b, fam, err))
			case n > 0:
				c.report(fmt.Sprintf("iptables-%s %s chain nat %s and %d jump(s) to it", b, fam, chain, n-1))
			}
		}
	}
	return errors.Join(errs...)
}

// removeChain deletes the jumps from POSTROUTING to chain and chain, in
// one restore; n counts them with the chain (0: none was there).
func removeChain(ctx context.Context, r iptables.Runner, chain string) (n int, err error) {
	hooks, _, err := r.ListChain(ctx, "nat", "POSTROUTING")
	if err != nil {
		return 0, err
	}
	_, exists, err := r.ListChain(ctx, "nat", chain)
	if err != nil {
		return 0, err
	}
	b := iptables.NewBatch()
	for _, h := range hooks {
		if strings.HasSuffix(h, "-j "+chain) {
			b.Delete("nat", "POSTROUTING", h)
			n++
		}
	}
	if exists {
		b.DeleteChain("nat", chain)
		n++
	}
	if b.Empty() {
		return 0, nil
	}
	return n, r.Restore(ctx, b.Bytes())
}

// binary removes an installed plugin binary when it is ours; another
// project's plugin of the same name stays (and is logged).
func (c *cniCleaner) binary(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read plugin %s: %w", path, err)
	}
	if !bytes.Contains(data, []byte(moduleMark)) {
		c.log.Warn("plugin binary is not nodenet's; left alone", "path", path)
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove plugin %s: %w", path, err)
	}
	c.report("plugin binary " + path)
	return nil
}
