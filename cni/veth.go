package cni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// HostVethName is the host-side name of an attachment's veth: derived from
// the container ID and interface name (FNV-1a, 32 bits), so DEL and GC
// find it without any state, and a retried ADD finds what a crashed one
// left.
func HostVethName(containerID, ifName string) string {
	return "veth" + hash32(containerID+"/"+ifName)
}

// hash32 is the FNV-1a hash of s in hex. (Not crypto/sha256: the crypto
// packages' initialization is a measurable part of a CNI plugin's
// start-up, and nothing here needs a cryptographic hash.)
func hash32(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

// The host veth's alias names its owner, so GC can tell our veths (and
// their attachment) from anyone else's on the same node.
const aliasPrefix = "nodenet:"

func vethAlias(network, containerID, ifName string) string {
	return aliasPrefix + network + ":" + containerID + ":" + ifName
}

// parseAlias inverts vethAlias. Network names, container IDs and interface
// names cannot contain ':'.
func parseAlias(alias string) (network string, a hostlocal.Attachment, ok bool) {
	rest, ok := strings.CutPrefix(alias, aliasPrefix)
	if !ok {
		return "", a, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return "", a, false
	}
	return parts[0], hostlocal.Attachment{ContainerID: parts[1], IfName: parts[2]}, true
}

var native = binary.NativeEndian

// randomMAC is a locally administered unicast address. Choosing it here
// rather than letting the kernel do it saves reading the links back.
func randomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 8)
	binary.LittleEndian.PutUint64(mac, rand.Uint64())
	mac = mac[:6]
	mac[0] = mac[0]&0xfe | 0x02
	return mac, nil
}

type vethPair struct {
	hostName        string
	hostMAC, podMAC net.HardwareAddr
	// podIndex is the pod end's ifindex, when the kernel reported it.
	podIndex int
}

// createVeth creates the pair in one request — the host end up and already
// a port of the bridge, the pod end inside the pod's namespace under its
// final name — then tags the host end with its owner and sets hairpin mode
// in a second. (The netlink library would take five round trips: it
// neither sets the master at creation nor combines the rest.) A leftover
// host end of the same attachment (an ADD that crashed) is replaced.
func createVeth(h *netlink.Handle, c *rtnlConn, podNS ns.NetNS, br netlink.Link, n *network, containerID, ifName string) (*vethPair, error) {
	v := &vethPair{hostName: HostVethName(containerID, ifName)}
	alias := vethAlias(n.name, containerID, ifName)
	if len(alias) > 255 {
		return nil, errorf(CodeInvalidConfig, "network name %q is too long to tag the host interface", n.name)
	}
	var err error
	if v.hostMAC, err = randomMAC(); err != nil {
		return nil, err
	}
	if v.podMAC, err = randomMAC(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		v.podIndex, err = newVeth(c, v, ifName, n.mtu, br.Attrs().Index, int(podNS.Fd()))
		if err == nil {
			break
		}
		if attempt > 0 || !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create veth %s <-> %s: %w", v.hostName, ifName, err)
		}
		old, lerr := h.LinkByName(v.hostName)
		if lerr != nil {
			return nil, fmt.Errorf("create veth %s <-> %s: %s already exists in %s: %w", v.hostName, ifName, ifName, podNS.Path(), err)
		}
		// The kernel ignores an alias in RTM_NEWLINK, so a crash right
		// after creation leaves our name without it.
		if a := old.Attrs().Alias; a != alias && a != "" {
			return nil, fmt.Errorf("create veth: host interface %s exists and is not this attachment's (alias %q)", v.hostName, a)
		}
		if err := h.LinkDel(old); err != nil && !isLinkNotFound(err) {
			return nil, fmt.Errorf("remove stale veth %s: %w", v.hostName, err)
		}
	}
	if err := tagPort(c, v.hostName, alias, n.hairpin); err != nil {
		deleteLink(h, v.hostName, nil)
		return nil, fmt.Errorf("configure %s: %w", v.hostName, err)
	}
	return v, nil
}

// newVeth sends the RTM_NEWLINK that creates the pair (in the calling
// thread's namespace for the host end). With NLM_F_ECHO, kernels since 6.3
// answer with the new host end, whose IFLA_LINK is the pod end's ifindex;
// older ones do not, and podIndex is 0.
func newVeth(c *rtnlConn, v *vethPair, ifName string, mtu, master, podFd int) (podIndex int, err error) {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK|unix.NLM_F_ECHO)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Flags, msg.Change = unix.IFF_UP, unix.IFF_UP
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(v.hostName)))
	req.AddData(nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(mtu))))
	req.AddData(nl.NewRtAttr(unix.IFLA_ADDRESS, v.hostMAC))
	req.AddData(nl.NewRtAttr(unix.IFLA_MASTER, nl.Uint32Attr(uint32(master))))
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("veth"))
	peer := info.AddRtAttr(nl.IFLA_INFO_DATA, nil).AddRtAttr(nl.VETH_INFO_PEER, nil)
	// The pod end cannot come up in this request: veth refuses to open
	// before its peer is linked (ENOTCONN).
	nl.NewIfInfomsgChild(peer, unix.AF_UNSPEC)
	peer.AddRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(ifName))
	peer.AddRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(mtu)))
	peer.AddRtAttr(unix.IFLA_ADDRESS, v.podMAC)
	peer.AddRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(podFd)))
	req.AddData(info)
	msgs, err := c.exec(req, unix.RTM_NEWLINK)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if len(m) < unix.SizeofIfInfomsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[unix.SizeofIfInfomsg:])
		if err != nil {
			continue
		}
		for _, a := range attrs {
			if a.Attr.Type == unix.IFLA_LINK && len(a.Value) == 4 {
				return int(native.Uint32(a.Value)), nil
			}
		}
	}
	return 0, nil
}

// tagPort sets the owner alias and, optionally, hairpin mode on a bridge
// port, addressed by name, in one request.
func tagPort(c *rtnlConn, name, alias string, hairpin bool) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFALIAS, []byte(alias)))
	if hairpin {
		info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
		info.AddRtAttr(nl.IFLA_INFO_SLAVE_KIND, nl.NonZeroTerminated("bridge"))
		info.AddRtAttr(nl.IFLA_INFO_SLAVE_DATA, nil).AddRtAttr(nl.IFLA_BRPORT_MODE, nl.Uint8Attr(1))
		req.AddData(info)
	}
	_, err := c.exec(req, 0)
	return err
}

// disableDAD stops duplicate address detection on the pod interface before
// it gets IPv6 addresses: the addresses come from our allocator, and DAD
// would keep them tentative (unusable) for a second or more.
func disableDAD(podNS ns.NetNS, ifName string) error {
	return podNS.Do(func(ns.NetNS) error {
		if _, err := sysctl.Sysctl("net/ipv6/conf/"+ifName+"/accept_dad", "0"); err != nil {
			return fmt.Errorf("disable DAD on %s: %w", ifName, err)
		}
		return nil
	})
}

// deleteLink removes a link by name; a link that is already gone is fine.
func deleteLink(h *netlink.Handle, name string, owned func(netlink.Link) bool) error {
	l, err := h.LinkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if owned != nil && !owned(l) {
		return nil
	}
	if err := h.LinkDel(l); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// dump retries a netlink dump that concurrent changes interrupted (the
// kernel then returns a possibly inconsistent result and NLM_F_DUMP_INTR).
func dump[T any](what string, f func() ([]T, error)) ([]T, error) {
	var err error
	for range 10 {
		var out []T
		out, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", what, err)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("list %s: %w", what, err)
}
