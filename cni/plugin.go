package cni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/subnetenv"
)

// Plugin implements the CNI commands. Each method takes what the runtime
// passed (environment and stdin, as protocol.CmdArgs) and acts on the network
// namespace of the calling thread as the host side; the binary runs it in
// the node's namespace, tests on a thread inside a throwaway one.
type Plugin struct {
	// Log receives diagnostics (never stdout, which carries the result).
	// nil discards them.
	Log *slog.Logger
	// AfterReserve, when set, runs in ADD after the addresses are reserved
	// and the veth pair exists, before the pod side is configured: the
	// moment with the most to clean up. Crash tests stop the process there.
	AfterReserve func()
	// Reaper, when set, takes over deleting a pod's veth pair once DEL has
	// cut it off: unregistering a network device waits for RCU grace
	// periods, 10-20 ms that would otherwise be most of DEL. DEL takes the
	// pod end down and renames it (the pod is off the bridge and its
	// interface name is free at once), marks the host end doomed,
	// releases the addresses, and calls Reaper, which must arrange for
	// ReapDoomed to run soon in this namespace. If Reaper fails, or is
	// nil, DEL deletes the pair itself. GC also reaps.
	Reaper func() error
	// Prepared, when set, is the pod namespace of this command opened in
	// advance (PreparePod); a command for another namespace ignores it.
	Prepared *PreparedPod
}

var _ protocol.Plugin = (*Plugin)(nil)

// start parses the configuration and sets up the command's logger (done
// closes the configuration's log file); for a command about one
// attachment (all but GC) it also checks the container ID and interface
// name.
func (p *Plugin) start(args *protocol.CmdArgs, attachment bool) (c *NetConf, log *slog.Logger, done func(), err error) {
	if c, err = ParseConfig(args.StdinData); err != nil {
		return nil, nil, nil, err
	}
	log, done = p.logger(c, args)
	if attachment {
		if err := protocol.ValidateArgs(args); err != nil {
			done()
			return nil, nil, nil, err
		}
	}
	return c, log, done, nil
}

// logger adds the configuration's optional log file to p.Log.
func (p *Plugin) logger(c *NetConf, args *protocol.CmdArgs) (*slog.Logger, func()) {
	base := p.Log
	if base == nil {
		base = slog.New(slog.DiscardHandler)
	}
	closeFn := func() {}
	if c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
		if err != nil {
			base.Warn("cannot open log file", "path", c.LogFile, "err", err)
		} else {
			base = slog.New(slog.NewMultiHandler(base.Handler(), slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})))
			closeFn = func() { f.Close() }
		}
	}
	return withLazyAttrs(base, slog.String("network", c.Name), slog.String("container", args.ContainerID), slog.String("ifname", args.IfName)), closeFn
}

// Add implements ADD and returns the result in the configuration's version.
func (p *Plugin) Add(ctx context.Context, args *protocol.CmdArgs) (*protocol.Result, error) {
	c, log, done, err := p.start(args, true)
	if err != nil {
		return nil, err
	}
	defer done()
	if args.Netns == "" {
		return nil, protocol.Errorf(protocol.CodeBadEnv, "CNI_NETNS is empty")
	}
	requested, err := requestedIPs(c, args.Args)
	if err != nil {
		return nil, err
	}
	env, err := readSubnetEnv(c.SubnetFile)
	if err != nil {
		return nil, err
	}

	if c.Type == TypeFlannel {
		return p.addFlannel(ctx, log, c, env, args, requested)
	}
	n, err := nodenetNetwork(c, env)
	if err != nil {
		return nil, err
	}
	return p.addNetwork(ctx, log, c, n, args, requested)
}

// addFlannel renders and caches the delegate like upstream flannel, then
// runs a bridge delegate in-process and any other type as a binary.
func (p *Plugin) addFlannel(ctx context.Context, log *slog.Logger, c *NetConf, env subnetenv.Env, args *protocol.CmdArgs, requested []netip.Addr) (_ *protocol.Result, err error) {
	conf, typ, err := renderDelegate(c, env)
	if err != nil {
		return nil, err
	}
	if err := saveDelegate(c.DataDir, args.ContainerID, conf); err != nil {
		return nil, protocol.WithCode(protocol.CodeIO, err)
	}
	defer func() {
		if err != nil {
			removeDelegate(c.DataDir, args.ContainerID)
		}
	}()
	if typ != defaultDelegateType {
		return execDelegate(ctx, "ADD", typ, conf, args)
	}
	n, err := bridgeNetwork(conf)
	if err != nil {
		return nil, err
	}
	return p.addNetwork(ctx, log, c, n, args, requested)
}

func (p *Plugin) addNetwork(ctx context.Context, log *slog.Logger, c *NetConf, n *network, args *protocol.CmdArgs, requested []netip.Addr) (*protocol.Result, error) {
	res, err := p.add(ctx, log, n, args, requested)
	if err != nil {
		log.Warn("ADD failed", "err", err)
		return nil, err
	}
	log.Info("ADD", "ips", res.IPs)
	return protocol.Chain(c.PrevResult, res), nil
}

func (p *Plugin) add(ctx context.Context, log *slog.Logger, n *network, args *protocol.CmdArgs, requested []netip.Addr) (_ *protocol.Result, err error) {
	if len(n.rangeSets) == 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "no address ranges to allocate from")
	}
	podNS, err := p.openPod(args.Netns)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeBadEnv, "CNI_NETNS %q: %w", args.Netns, err)
	}
	defer podNS.Close()
	hc, err := kernel.Dial()
	if err != nil {
		return nil, err
	}
	defer hc.Close()
	store, err := hostlocal.Open(n.dataDir, n.name)
	if err != nil {
		return nil, protocol.WithCode(protocol.CodeIO, err)
	}
	defer store.Close()

	allocs, err := store.Allocate(hostlocal.Request{ContainerID: args.ContainerID, IfName: args.IfName, RangeSets: n.rangeSets, IPs: requested})
	switch {
	case errors.Is(err, hostlocal.ErrExhausted), errors.Is(err, hostlocal.ErrInUse):
		return nil, protocol.Errorf(protocol.CodeTryAgainLater, "allocate address in %s: %w", n.name, err)
	case errors.Is(err, hostlocal.ErrNotInRange):
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "allocate address in %s: %w", n.name, err)
	case err != nil:
		return nil, protocol.WithCode(protocol.CodeIO, fmt.Errorf("allocate address in %s: %w", n.name, err))
	}
	success := false
	defer func() {
		if !success {
			if _, rerr := store.Release(args.ContainerID, args.IfName); rerr != nil {
				log.Error("roll back address reservation", "err", rerr)
			}
		}
	}()

	gateways := gatewayPrefixes(allocs)
	br, err := ensureBridge(hc, n, gateways)
	if err != nil {
		return nil, err
	}
	pair, err := createVeth(hc, podNS, br, n, args.ContainerID, args.IfName)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !success {
			if derr := deleteLink(hc, pair.hostName, nil); derr != nil {
				log.Error("roll back veth", "err", derr)
			}
		}
	}()
	if p.AfterReserve != nil {
		p.AfterReserve()
	}

	routes := podRoutes(n, allocs)
	if err := configurePod(podNS, args.IfName, pair.podIndex, allocs, routes); err != nil {
		return nil, err
	}
	if n.isGateway {
		v4, v6 := familyGateways(allocs)
		if err := kernel.EnableForwarding(v4.IsValid(), v6.IsValid()); err != nil {
			return nil, err
		}
	}
	if n.ipMasq {
		if err := ensureMasq(ctx, n, allocs); err != nil {
			return nil, err
		}
	}
	success = true
	return buildResult(n, br.MAC, pair, args.IfName, args.Netns, allocs, routes), nil
}

func gatewayPrefixes(allocs []hostlocal.Allocation) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range allocs {
		gw := netip.PrefixFrom(a.Gateway, a.Address.Bits())
		if !slices.Contains(out, gw) {
			out = append(out, gw)
		}
	}
	return out
}
