package cni

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Del implements DEL. It succeeds when the namespace, the veth or the
// allocation is already gone, and needs no subnet.env.
func (p *Plugin) Del(ctx context.Context, args *CmdArgs) error {
	c, log, done, err := p.start(args, true)
	if err != nil {
		return err
	}
	defer done()

	n := teardownNetwork(c)
	if c.Type == TypeFlannel {
		conf, err := loadDelegate(c.DataDir, args.ContainerID)
		if err != nil {
			return withCode(CodeIO, err)
		}
		if conf != nil {
			typ, err := delegateType(conf)
			if err == nil && typ != defaultDelegateType {
				if _, err := execDelegate(ctx, "DEL", typ, conf, args); err != nil {
					return err
				}
				return withCode(CodeIO, removeDelegate(c.DataDir, args.ContainerID))
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
			return withCode(CodeIO, err)
		}
	}
	log.Info("DEL")
	return nil
}

func (p *Plugin) del(n *network, args *CmdArgs) error {
	hostName := HostVethName(args.ContainerID, args.IfName)
	alias := vethAlias(n.name, args.ContainerID, args.IfName)
	reaped := false
	if args.Netns != "" {
		podNS, err := p.openPod(args.Netns)
		switch {
		case errors.Is(err, errNSNotExist), errors.Is(err, errNotNS):
			// The pod's namespace is gone, and its end of the veth with it.
		case err != nil:
			return err
		default:
			pc, err := rtnlSocket(podNS)
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
		hc, err := rtnlSocket(nil)
		if err != nil {
			return err
		}
		defer hc.Close()
		doomed := false
		err = deleteLink(hc, hostName, func(l *link) bool {
			doomed = l.group == doomedGroup
			return l.alias == alias && !doomed
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
		return withCode(CodeIO, err)
	}
	defer store.Close()
	if _, err := store.Release(args.ContainerID, args.IfName); err != nil {
		return withCode(CodeIO, err)
	}
	return nil
}

// takeDownPod removes the pod's interface. When it is our veth and a
// Reaper is set, the pod end is only taken down and renamed and the pair
// goes to the Reaper (reaped reports that); otherwise the pair is deleted
// here. An interface that is already gone is fine.
func (p *Plugin) takeDownPod(pc *rtnlConn, ifName, hostName, alias string) (reaped bool, err error) {
	l, err := pc.getLink(ifName, 0)
	if isLinkNotFound(err) {
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
	if p.Reaper != nil && l.kind == "veth" {
		if hc, err := rtnlSocket(nil); err == nil {
			cut := ownPeer(hc, l.parent, hostName, alias) && doom(hc, l.parent) == nil
			hc.Close()
			if cut && rename(pc, l.index, deadName()) == nil && p.Reaper() == nil {
				return true, nil
			}
		}
	}
	if err := pc.delLink(l.index); err != nil && !isLinkNotFound(err) {
		return false, fmt.Errorf("delete %s: %w", ifName, err)
	}
	return false, nil
}

// rename renames a link; kernels before 6.2 refuse to rename one that is
// up, so it is taken down first there.
func rename(c *rtnlConn, index int, name string) error {
	err := c.setLink(index, name, false)
	if errors.Is(err, unix.EBUSY) {
		if err := c.setLink(index, "", true); err != nil {
			return err
		}
		err = c.setLink(index, name, false)
	}
	return err
}

// ownPeer reports whether the host link with index is our end of the
// attachment's pair.
func ownPeer(c *rtnlConn, index int, name, alias string) bool {
	l, err := c.getLink("", index)
	return err == nil && l.name == name && l.alias == alias
}
