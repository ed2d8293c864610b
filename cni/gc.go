package cni

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// GC implements GC (spec 1.1): everything of this network whose attachment
// is not in cni.dev/valid-attachments goes — address reservations
// (whoever wrote them, host-local included), our host-side veths, and
// flannel delegate cache entries. This is what cleans up after a node
// reboot or a crashed ADD, the leaks upstream's bridge + host-local keep
// (containernetworking/plugins #697, #1047).
func (p *Plugin) GC(ctx context.Context, args *protocol.CmdArgs) error {
	c, log, done, err := p.start(args, false)
	if err != nil {
		return err
	}
	defer done()
	n := teardownNetwork(c)
	valid := make([]hostlocal.Attachment, 0, len(c.ValidAttachments))
	validIDs := make(map[string]bool, len(c.ValidAttachments))
	for _, a := range c.ValidAttachments {
		valid = append(valid, hostlocal.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
		validIDs[a.ContainerID] = true
	}

	var errs []error
	veths, err := gcVeths(n.name, valid)
	errs = append(errs, err)
	store, err := hostlocal.Open(n.dataDir, n.name)
	if err != nil {
		return protocol.WithCode(protocol.CodeIO, errors.Join(append(errs, err)...))
	}
	defer store.Close()
	released, err := store.GC(valid)
	errs = append(errs, err)
	var caches []string
	if c.Type == TypeFlannel {
		caches, err = gcDelegates(c.DataDir, n.name, validIDs)
		errs = append(errs, err)
	}
	log.Info("GC", "valid", len(valid), "released", len(released), "veths", veths, "delegateCaches", caches)
	return errors.Join(errs...)
}

// gcVeths deletes our host-side veths of network whose attachment is not
// valid (the alias tells ours from other tools' and other networks'), and
// whatever DELs left to a reaper: all doomed first, then deleted in one
// request.
func gcVeths(network string, valid []hostlocal.Attachment) ([]string, error) {
	hc, err := kernel.Dial()
	if err != nil {
		return nil, err
	}
	defer hc.Close()
	links, err := hc.Links()
	if err != nil {
		return nil, err
	}
	keep := make(map[hostlocal.Attachment]bool, len(valid))
	for _, a := range valid {
		keep[a] = true
	}
	var deleted []string
	var errs []error
	for _, l := range links {
		nw, a, ok := parseAlias(l.Alias)
		if !ok || nw != network || keep[a] || l.Kind != "veth" {
			continue
		}
		if err := hc.SetDownInGroup(l.Index, doomedGroup); err != nil && !kernel.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete stale veth %s: %w", l.Name, err))
			continue
		}
		deleted = append(deleted, l.Name)
	}
	return deleted, errors.Join(append(errs, ReapDoomed())...)
}

// Status implements STATUS (spec 1.1): ready when subnet.env is there and
// valid, the bridge could be set up, and the allocation store is usable.
// Anything else is code 50, "plugin not available".
func (p *Plugin) Status(ctx context.Context, args *protocol.CmdArgs) error {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	env, err := readSubnetEnv(c.SubnetFile)
	if err != nil {
		return &protocol.Error{Code: protocol.CodeNotAvailable, Err: err}
	}
	var n *network
	if c.Type == TypeFlannel {
		conf, typ, err := renderDelegate(c, env)
		if err != nil {
			return &protocol.Error{Code: protocol.CodeNotAvailable, Err: err}
		}
		if typ != defaultDelegateType {
			return nil // another plugin's business
		}
		if n, err = bridgeNetwork(conf); err != nil {
			return &protocol.Error{Code: protocol.CodeNotAvailable, Err: err}
		}
	} else if n, err = nodenetNetwork(c, env); err != nil {
		return &protocol.Error{Code: protocol.CodeNotAvailable, Err: err}
	}
	hc, err := kernel.Dial()
	if err != nil {
		return &protocol.Error{Code: protocol.CodeNotAvailable, Err: err}
	}
	defer hc.Close()
	if err := checkBridge(hc, n, rangeGateways(n)); err != nil {
		return &protocol.Error{Code: protocol.CodeNotAvailable, Err: err}
	}
	if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
		return &protocol.Error{Code: protocol.CodeNotAvailable, Err: fmt.Errorf("allocation store: %w", err)}
	}
	return nil
}

// rangeGateways are the gateways of the first range of each set, which is
// what the bridge carries once pods exist.
func rangeGateways(n *network) []netip.Prefix {
	var out []netip.Prefix
	for _, set := range n.rangeSets {
		out = append(out, netip.PrefixFrom(set[0].Gateway, set[0].Subnet.Bits()))
	}
	return out
}
