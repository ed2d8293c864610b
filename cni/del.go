package cni

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Del implements DEL. It succeeds when the namespace, the veth or the
// allocation is already gone, and needs no subnet.env.
func (p *Plugin) Del(ctx context.Context, args *protocol.CmdArgs) error {
	c, log, done, err := p.start(args, true)
	if err != nil {
		return err
	}
	defer done()

	n := teardownNetwork(c)
	if c.Type == TypeFlannel {
		conf, err := loadDelegate(c.DataDir, args.ContainerID)
		if err != nil {
			return protocol.WithCode(protocol.CodeIO, err)
		}
		if conf != nil {
			typ, err := delegateType(conf)
			if err == nil && typ != defaultDelegateType {
				if _, err := execDelegate(ctx, "DEL", typ, conf, args); err != nil {
					return err
				}
				return protocol.WithCode(protocol.CodeIO, removeDelegate(c.DataDir, args.ContainerID))
			}
			if cached, err := bridgeNetwork(conf); err == nil {
				n = cached
			} else {
				log.Warn("unreadable delegate cache, tearing down with defaults", "err", err)
			}
		}
	}
	if err := p.del(n, args); err != nil {
		log.Warn("DEL failed", "err", err)
		return err
	}
	if c.Type == TypeFlannel {
		if err := removeDelegate(c.DataDir, args.ContainerID); err != nil {
			return protocol.WithCode(protocol.CodeIO, err)
		}
	}
	log.Info("DEL")
	return nil
}

func (p *Plugin) del(n *network, args *protocol.CmdArgs) error {
	hostName := HostVethName(args.ContainerID, args.IfName)
	alias := vethAlias(n.name, args.ContainerID, args.IfName)
	reaped := false
	if args.Netns != "" {
		podNS, err := p.openPod(args.Netns)
		switch {
		case errors.Is(err, kernel.ErrNoNetNS), errors.Is(err, kernel.ErrNotNetNS):
			// The pod's namespace is gone, and its end of the veth with it.
		case err != nil:
			return err
		default:
			pc, err := podNS.Dial()
			if err == nil {
				reaped, err = p.takeDownPod(pc, args.IfName, hostName, alias)
				pc.Close()
			}
			podNS.Close()
			if err != nil {
				return err
			}
		}
	}
	if !reaped {
		// Our host end outlives the pod end if the namespace went away
		// without taking the pair along, if ADD crashed, or if an earlier
		// DEL left it to a reaper (then it stays the reaper's).
		hc, err := kernel.Dial()
		if err != nil {
			return err
		}
		defer hc.Close()
		doomed := false
		err = deleteLink(hc, hostName, func(l *kernel.Link) bool {
			doomed = l.Group == doomedGroup
			return l.Alias == alias && !doomed
		})
		if err != nil {
			return err
		}
		if doomed && (p.Reaper == nil || p.Reaper() != nil) {
			if err := ReapDoomed(); err != nil {
				return err
			}
		}
	}
	// Addresses go last: while the interface may still be up, its address
	// must not be handed to another pod.
	store, err := hostlocal.Open(n.dataDir, n.name)
	if err != nil {
		return protocol.WithCode(protocol.CodeIO, err)
	}
	defer store.Close()
	if _, err := store.Release(args.ContainerID, args.IfName); err != nil {
		return protocol.WithCode(protocol.CodeIO, err)
	}
	return nil
}

// takeDownPod removes the pod's interface. When it is our veth and a
// Reaper is set, the pod end is only taken down and renamed and the pair
// goes to the Reaper (reaped reports that); otherwise the pair is deleted
// here. An interface that is already gone is fine.
func (p *Plugin) takeDownPod(pc *kernel.Conn, ifName, hostName, alias string) (reaped bool, err error) {
	l, err := pc.Link(ifName)
	if kernel.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", ifName, err)
	}
	// Only our own pair goes to the reaper: its host end is the pod end's
	// peer and carries our name and tag (a pair set up by upstream's bridge
	// plugin before the binary was replaced does not, and is deleted
	// here). Once the host end is down the pod is off the bridge; the
	// rename frees the name for another attachment in the namespace.
	if p.Reaper != nil && l.Kind == "veth" {
		if hc, err := kernel.Dial(); err == nil {
			cut := ownPeer(hc, l.Parent, hostName, alias) && hc.SetDownInGroup(l.Parent, doomedGroup) == nil
			hc.Close()
			if cut && pc.Rename(l.Index, deadName()) == nil && p.Reaper() == nil {
				return true, nil
			}
		}
	}
	if err := pc.DeleteLink(l.Index); err != nil && !kernel.IsNotFound(err) {
		return false, fmt.Errorf("delete %s: %w", ifName, err)
	}
	return false, nil
}

// ownPeer reports whether the host link with index is our end of the
// attachment's pair.
func ownPeer(c *kernel.Conn, index int, name, alias string) bool {
	l, err := c.LinkByIndex(index)
	return err == nil && l.Name == name && l.Alias == alias
}
