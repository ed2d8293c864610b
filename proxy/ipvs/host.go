package ipvs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/proxy"
)

// DeviceName is the nodenet-owned dummy device the VIPs are bound to (so
// the kernel takes packets to them as local, where IPVS sees them), like
// kube-proxy's kube-ipvs0.
const DeviceName = "nodenet-ipvs0"

// Host is what the proxier needs of the node besides IPVS: the VIP device,
// sysctls, the node's own addresses and the nft table. NetHost is the
// kernel; tests use a fake.
type Host interface {
	// EnsureDevice creates the VIP device if need be and sets the sysctls
	// IPVS needs (strict ARP, conntrack for masquerading).
	EnsureDevice() error
	DeviceExists() (bool, error)
	RemoveDevice() error
	// VIPs lists the device's addresses of family f.
	VIPs(f proxy.Family) ([]netip.Addr, error)
	// AddVIPs binds addresses the device does not hold yet (EEXIST for
	// one it holds) and DelVIPs unbinds addresses (one already gone is
	// not an error), each over one socket, many to a request.
	AddVIPs([]netip.Addr) error
	DelVIPs([]netip.Addr) error
	// NodeAddrs lists the node's own addresses of family f (NodePorts on
	// all local addresses): not loopback, not link-local, not the VIPs.
	NodeAddrs(f proxy.Family) ([]netip.Addr, error)
	// ApplyNft runs an nft script in one transaction.
	ApplyNft(ctx context.Context, script string) error
	// NftTableExists reports whether "<family> <table>" exists.
	NftTableExists(ctx context.Context, family, table string) (bool, error)
	// RecordedNodePorts lists the NodePort virtual servers of family f
	// that the table TableName records as nodenet's (none without the
	// table).
	RecordedNodePorts(ctx context.Context, f proxy.Family) ([]ServiceKey, error)
}

// NetHost is Host in the network namespace at Netns ("" for the caller's).
type NetHost struct {
	Netns string
}

func (h NetHost) do(fn func(*netlink.Handle) error) error {
	run := func() error {
		// Routing only: a handle of every protocol would also need XFRM.
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink handle: %w", err)
		}
		defer nl.Close()
		return fn(nl)
	}
	if h.Netns == "" {
		return run()
	}
	return netnsutil.Do(h.Netns, run)
}

// sysctls are what IPVS needs: strict ARP, so the VIP device does not
// answer ARP for VIPs (kubernetes#59976); conntrack for IPVS connections,
// so the nft masquerade rule sees them; dropping connections to removed
// real servers and persistence templates of weight-0 ones at once instead
// of letting them linger.
var sysctls = map[string]string{
	"net/ipv4/conf/all/arp_ignore":          "1",
	"net/ipv4/conf/all/arp_announce":        "2",
	"net/ipv4/vs/conntrack":                 "1",
	"net/ipv4/vs/expire_nodest_conn":        "1",
	"net/ipv4/vs/expire_quiescent_template": "1",
}

// EnsureDevice implements Host.
func (h NetHost) EnsureDevice() error {
	return h.do(func(nl *netlink.Handle) error {
		l, err := nl.LinkByName(DeviceName)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if !errors.As(err, &nf) {
				return fmt.Errorf("look up %s: %w", DeviceName, err)
			}
			la := netlink.NewLinkAttrs()
			la.Name = DeviceName
			if err := nl.LinkAdd(&netlink.Dummy{LinkAttrs: la}); err != nil {
				if errors.Is(err, syscall.EOPNOTSUPP) {
					return fmt.Errorf("create %s: the kernel has no dummy device (CONFIG_DUMMY), which the ipvs mode binds VIPs to: %w", DeviceName, err)
				}
				return fmt.Errorf("create %s: %w", DeviceName, err)
			}
			if l, err = nl.LinkByName(DeviceName); err != nil {
				return fmt.Errorf("look up %s: %w", DeviceName, err)
			}
		}
		if l.Type() != "dummy" {
			return fmt.Errorf("%s exists but is a %s device, not nodenet's dummy", DeviceName, l.Type())
		}
		if err := nl.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", DeviceName, err)
		}
		for k, v := range sysctls {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err)
			}
		}
		return nil
	})
}

// DeviceExists implements Host.
func (h NetHost) DeviceExists() (bool, error) {
	found := false
	err := h.do(func(nl *netlink.Handle) error {
		_, err := nl.LinkByName(DeviceName)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		found = err == nil
		return err
	})
	return found, err
}

// RemoveDevice implements Host; a missing device is not an error.
func (h NetHost) RemoveDevice() error {
	return h.do(func(nl *netlink.Handle) error {
		l, err := nl.LinkByName(DeviceName)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("look up %s: %w", DeviceName, err)
		}
		if err := nl.LinkDel(l); err != nil {
			return fmt.Errorf("delete %s: %w", DeviceName, err)
		}
		return nil
	})
}

func nlFamily(f proxy.Family) int {
	if f == proxy.IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (h NetHost) addrs(f proxy.Family, keep func(l netlink.Link, a netip.Addr) bool) ([]netip.Addr, error) {
	var out []netip.Addr
	err := h.do(func(nl *netlink.Handle) error {
		links, err := nl.LinkList()
		if err != nil {
			return fmt.Errorf("list links: %w", err)
		}
		for _, l := range links {
			as, err := nl.AddrList(l, nlFamily(f))
			if err != nil {
				return fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
			}
			for _, a := range as {
				ip, ok := netip.AddrFromSlice(a.IP)
				if ok && keep(l, ip.Unmap()) {
					out = append(out, ip.Unmap())
				}
			}
		}
		return nil
	})
	return out, err
}

// VIPs implements Host.
func (h NetHost) VIPs(f proxy.Family) ([]netip.Addr, error) {
	// Not the link-local address the kernel gives the device when it
	// comes up: not a VIP, and not to be removed.
	return h.addrs(f, func(l netlink.Link, a netip.Addr) bool {
		return l.Attrs().Name == DeviceName && !a.IsLinkLocalUnicast()
	})
}

// NodeAddrs implements Host.
func (h NetHost) NodeAddrs(f proxy.Family) ([]netip.Addr, error) {
	return h.addrs(f, func(l netlink.Link, a netip.Addr) bool {
		return l.Attrs().Name != DeviceName && !a.IsLoopback() && !a.IsLinkLocalUnicast()
	})
}

// vipConn opens a route netlink socket in h's namespace (the socket
// stays there) and finds the device's index.
func (h NetHost) vipConn() (*kernel.Conn, int, error) {
	var c *kernel.Conn
	dial := func() (err error) {
		c, err = kernel.Dial()
		return err
	}
	var err error
	if h.Netns == "" {
		err = dial()
	} else {
		err = netnsutil.Do(h.Netns, dial)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("route netlink socket: %w", err)
	}
	l, err := c.Link(DeviceName)
	if err != nil {
		c.Close()
		return nil, 0, fmt.Errorf("look up %s: %w", DeviceName, err)
	}
	return c, l.Index, nil
}

// vipChunk bounds the addresses of one request: their acknowledgements
// queue in the socket's default receive buffer before the first is read.
const vipChunk = 64

// AddVIPs implements Host: vipChunk addresses to a request.
func (h NetHost) AddVIPs(addrs []netip.Addr) error {
	return h.withDevice(addrs, func(c *kernel.Conn, index int) error {
		for len(addrs) > 0 {
			chunk := addrs[:min(len(addrs), vipChunk)]
			addrs = addrs[len(chunk):]
			var b kernel.Batch
			for _, a := range chunk {
				b.AddAddr(index, DeviceName, netip.PrefixFrom(a, a.BitLen()))
			}
			if err := c.Run(&b); err != nil {
				return fmt.Errorf("bind VIPs: %w", err)
			}
		}
		return nil
	})
}

// DelVIPs implements Host.
func (h NetHost) DelVIPs(addrs []netip.Addr) error {
	return h.withDevice(addrs, func(c *kernel.Conn, index int) error {
		for _, a := range addrs {
			if err := c.DelAddr(index, netip.PrefixFrom(a, a.BitLen())); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
				return fmt.Errorf("unbind %s from %s: %w", a, DeviceName, err)
			}
		}
		return nil
	})
}

// withDevice runs fn with a route netlink socket and the device's index,
// unless addrs is empty.
func (h NetHost) withDevice(addrs []netip.Addr, fn func(c *kernel.Conn, index int) error) error {
	if len(addrs) == 0 {
		return nil
	}
	c, index, err := h.vipConn()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c, index)
}

// ApplyNft implements Host with `nft -f -`.
func (h NetHost) ApplyNft(ctx context.Context, script string) error {
	_, err := h.nft(ctx, script, "-f", "-")
	return err
}

func (h NetHost) nft(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "nft", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	var err error
	if h.Netns != "" {
		if err = netnsutil.Start(h.Netns, cmd); err == nil {
			err = cmd.Wait()
		}
	} else {
		err = cmd.Run()
	}
	if err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return []byte(out.String()), nil
}

// NftTableExists implements Host.
func (h NetHost) NftTableExists(ctx context.Context, family, table string) (bool, error) {
	out, err := h.nft(ctx, "", "list", "tables", family)
	if err != nil {
		return false, err
	}
	return strings.Contains(string(out), "table "+family+" "+table+"\n"), nil
}

// RecordedNodePorts implements Host: the elements of the table's
// nodeports set, read as JSON (`nft -j`), whose protocol is a name or,
// without /etc/protocols, a number.
func (h NetHost) RecordedNodePorts(ctx context.Context, f proxy.Family) ([]ServiceKey, error) {
	out, err := h.nft(ctx, "", "-j", "list", "set", nftFamily(f), TableName, setNodePorts)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, nil // no table (or an older one without the set): nothing recorded
		}
		return nil, err
	}
	keys, err := parseNodePortSet(out)
	if err != nil {
		return nil, fmt.Errorf("nft set %s %s %s: %w", nftFamily(f), TableName, setNodePorts, err)
	}
	return keys, nil
}

// parseNodePortSet reads the elements of `nft -j list set` of the
// address . protocol . port type.
func parseNodePortSet(js []byte) ([]ServiceKey, error) {
	var doc struct {
		Nftables []struct {
			Set *struct {
				Elem []struct {
					Concat []json.RawMessage `json:"concat"`
				} `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("parse nft JSON: %w", err)
	}
	var out []ServiceKey
	for _, o := range doc.Nftables {
		if o.Set == nil {
			continue
		}
		for _, e := range o.Set.Elem {
			k, err := parseNodePortElem(e.Concat)
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
	}
	return out, nil
}

func parseNodePortElem(c []json.RawMessage) (ServiceKey, error) {
	var addr, proto string
	var port, protoNum uint16
	if len(c) != 3 || json.Unmarshal(c[0], &addr) != nil || json.Unmarshal(c[2], &port) != nil {
		return ServiceKey{}, fmt.Errorf("element %s: want address . protocol . port", c)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return ServiceKey{}, fmt.Errorf("element %s: %w", c, err)
	}
	k := ServiceKey{Addr: a, Port: port}
	var ok bool
	if json.Unmarshal(c[1], &protoNum) == nil {
		k.Protocol, ok = protoName(protoNum)
	} else if json.Unmarshal(c[1], &proto) == nil {
		k.Protocol = proxy.Protocol(strings.ToUpper(proto))
		ok = k.Protocol == proxy.TCP || k.Protocol == proxy.UDP || k.Protocol == proxy.SCTP
	}
	if !ok {
		return ServiceKey{}, fmt.Errorf("element %s: unknown protocol %s", c, c[1])
	}
	return k, nil
}
