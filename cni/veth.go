package cni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"

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

// randomMAC is a locally administered unicast address. Choosing it here
// rather than letting the kernel do it saves reading the links back.
func randomMAC() mac {
	m := make(mac, 8)
	binary.LittleEndian.PutUint64(m, rand.Uint64())
	m = m[:6]
	m[0] = m[0]&0xfe | 0x02
	return m
}

type vethPair struct {
	hostName        string
	hostMAC, podMAC mac
	// podIndex is the pod end's ifindex, when the kernel reported it.
	podIndex int
}

// createVeth creates the pair in one request — the host end up and already
// a port of the bridge, the pod end inside the pod's namespace under its
// final name — then tags the host end with its owner and sets hairpin mode
// in a second. (The netlink library would take five round trips: it
// neither sets the master at creation nor combines the rest.) A leftover
// host end of the same attachment (an ADD that crashed) is replaced.
func createVeth(c *rtnlConn, podNS *netNS, br *link, n *network, containerID, ifName string) (*vethPair, error) {
	v := &vethPair{hostName: HostVethName(containerID, ifName), hostMAC: randomMAC(), podMAC: randomMAC()}
	alias := vethAlias(n.name, containerID, ifName)
	if len(alias) > 255 {
		return nil, errorf(CodeInvalidConfig, "network name %q is too long to tag the host interface", n.name)
	}
	var err error
	for attempt := 0; ; attempt++ {
		v.podIndex, err = newVeth(c, v, ifName, n.mtu, br.index, int(podNS.Fd()))
		if err == nil {
			break
		}
		if attempt > 0 || !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create veth %s <-> %s: %w", v.hostName, ifName, err)
		}
		old, lerr := c.getLink(v.hostName, 0)
		if lerr != nil {
			return nil, fmt.Errorf("create veth %s <-> %s: %s already exists in %s: %w", v.hostName, ifName, ifName, podNS.Path(), err)
		}
		// The kernel ignores an alias in RTM_NEWLINK, so a crash right
		// after creation leaves our name without it.
		if a := old.alias; a != alias && a != "" {
			return nil, fmt.Errorf("create veth: host interface %s exists and is not this attachment's (alias %q)", v.hostName, a)
		}
		if err := c.delLink(old.index); err != nil && !isLinkNotFound(err) {
			return nil, fmt.Errorf("remove stale veth %s: %w", v.hostName, err)
		}
	}
	if err := tagPort(c, v.hostName, alias, n.hairpin); err != nil {
		deleteLink(c, v.hostName, nil)
		return nil, fmt.Errorf("configure %s: %w", v.hostName, err)
	}
	return v, nil
}

// newVeth sends the RTM_NEWLINK that creates the pair (in the calling
// thread's namespace for the host end). With NLM_F_ECHO, kernels since 6.3
// answer with the new host end, whose IFLA_LINK is the pod end's ifindex;
// older ones do not, and podIndex is 0.
//
// Each end gets one TX and one RX queue. The kernel's default is one of
// each per CPU, and every queue is a sysfs object registered with the
// device: on two CPUs that made creating a pair take 2.5 times as long
// (0.29 ms vs 0.11 ms), and it grows with the node. A veth's queues only
// matter to XDP programs attached to it; without one the kernel handles
// a veth's traffic on the sending CPU whatever the queue count.
func newVeth(c *rtnlConn, v *vethPair, ifName string, mtu, master, podFd int) (podIndex int, err error) {
	req := newRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK|unix.NLM_F_ECHO).
		add(ifinfomsg(unix.AF_UNSPEC, 0, unix.IFF_UP, unix.IFF_UP))
	req.attr(unix.IFLA_IFNAME, cstr(v.hostName)).
		attr(unix.IFLA_MTU, u32(uint32(mtu))).
		attr(unix.IFLA_ADDRESS, v.hostMAC).
		attr(unix.IFLA_MASTER, u32(uint32(master))).
		attr(unix.IFLA_NUM_TX_QUEUES, u32(1)).
		attr(unix.IFLA_NUM_RX_QUEUES, u32(1))
	req.nested(unix.IFLA_LINKINFO, func() {
		req.attr(unix.IFLA_INFO_KIND, []byte("veth"))
		req.nested(unix.IFLA_INFO_DATA, func() {
			// The pod end cannot come up in this request: veth refuses
			// to open before its peer is linked (ENOTCONN).
			req.nested(vethInfoPeer, func() {
				req.add(ifinfomsg(unix.AF_UNSPEC, 0, 0, 0))
				req.attr(unix.IFLA_IFNAME, cstr(ifName)).
					attr(unix.IFLA_MTU, u32(uint32(mtu))).
					attr(unix.IFLA_ADDRESS, v.podMAC).
					attr(unix.IFLA_NET_NS_FD, u32(uint32(podFd))).
					attr(unix.IFLA_NUM_TX_QUEUES, u32(1)).
					attr(unix.IFLA_NUM_RX_QUEUES, u32(1))
			})
		})
	})
	msgs, err := c.exec(req, unix.RTM_NEWLINK)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if l, err := decodeLink(m); err == nil && l.parent != 0 {
			return l.parent, nil
		}
	}
	return 0, nil
}

// tagPort sets the owner alias and, optionally, hairpin mode on a bridge
// port, addressed by name, in one request.
func tagPort(c *rtnlConn, name, alias string, hairpin bool) error {
	req := newRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, 0, 0, 0))
	req.attr(unix.IFLA_IFNAME, cstr(name)).attr(unix.IFLA_IFALIAS, []byte(alias))
	if hairpin {
		req.nested(unix.IFLA_LINKINFO, func() {
			req.attr(unix.IFLA_INFO_SLAVE_KIND, []byte("bridge"))
			req.nested(unix.IFLA_INFO_SLAVE_DATA, func() { req.attr(unix.IFLA_BRPORT_MODE, []byte{1}) })
		})
	}
	_, err := c.exec(req, 0)
	return err
}

// disableDAD stops duplicate address detection on the pod interface before
// it gets IPv6 addresses: the addresses come from our allocator, and DAD
// would keep them tentative (unusable) for a second or more.
func disableDAD(podNS *netNS, ifName string) error {
	return podNS.Do(func() error {
		if err := setSysctl("net/ipv6/conf/"+ifName+"/accept_dad", "0"); err != nil {
			return fmt.Errorf("disable DAD on %s: %w", ifName, err)
		}
		return nil
	})
}

// deleteLink removes a link by name; a link that is already gone is fine.
// With owned, only a link it approves of.
func deleteLink(c *rtnlConn, name string, owned func(*link) bool) error {
	l, err := c.getLink(name, 0)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if owned != nil && !owned(l) {
		return nil
	}
	if err := c.delLink(l.index); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}
