package cni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
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
func randomMAC() kernel.MAC {
	m := make(kernel.MAC, 8)
	binary.LittleEndian.PutUint64(m, rand.Uint64())
	m = m[:6]
	m[0] = m[0]&0xfe | 0x02
	return m
}

type vethPair struct {
	hostName        string
	hostMAC, podMAC kernel.MAC
	// podIndex is the pod end's ifindex, when the kernel reported it.
	podIndex int
}

// createVeth creates the pair in one request — the host end up and already
// a port of the bridge, the pod end inside the pod's namespace under its
// final name — then tags the host end with its owner and sets hairpin mode
// in a second. A leftover host end of the same attachment (an ADD that
// crashed) is replaced.
func createVeth(c *kernel.Conn, podNS *kernel.NetNS, br *kernel.Link, n *network, containerID, ifName string) (*vethPair, error) {
	v := &vethPair{hostName: HostVethName(containerID, ifName), hostMAC: randomMAC(), podMAC: randomMAC()}
	alias := vethAlias(n.name, containerID, ifName)
	if len(alias) > 255 {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "network name %q is too long to tag the host interface", n.name)
	}
	spec := kernel.Veth{HostName: v.hostName, HostMAC: v.hostMAC, PodName: ifName, PodMAC: v.podMAC, MTU: n.mtu, Master: br.Index, PodNS: podNS}
	var err error
	for attempt := 0; ; attempt++ {
		v.podIndex, err = c.CreateVeth(spec)
		if err == nil {
			break
		}
		if attempt > 0 || !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create veth %s <-> %s: %w", v.hostName, ifName, err)
		}
		old, lerr := c.Link(v.hostName)
		if lerr != nil {
			return nil, fmt.Errorf("create veth %s <-> %s: %s already exists in %s: %w", v.hostName, ifName, ifName, podNS.Path(), err)
		}
		// The kernel ignores an alias in RTM_NEWLINK, so a crash right
		// after creation leaves our name without it.
		if a := old.Alias; a != alias && a != "" {
			return nil, fmt.Errorf("create veth: host interface %s exists and is not this attachment's (alias %q)", v.hostName, a)
		}
		if err := c.DeleteLink(old.Index); err != nil && !kernel.IsNotFound(err) {
			return nil, fmt.Errorf("remove stale veth %s: %w", v.hostName, err)
		}
	}
	if err := c.ConfigurePort(v.hostName, alias, n.hairpin); err != nil {
		deleteLink(c, v.hostName, nil)
		return nil, fmt.Errorf("configure %s: %w", v.hostName, err)
	}
	return v, nil
}

// deleteLink removes a link by name; a link that is already gone is fine.
// With owned, only a link it approves of.
func deleteLink(c *kernel.Conn, name string, owned func(*kernel.Link) bool) error {
	l, err := c.Link(name)
	if kernel.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if owned != nil && !owned(l) {
		return nil
	}
	if err := c.DeleteLink(l.Index); err != nil && !kernel.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}
