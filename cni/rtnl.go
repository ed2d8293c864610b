package cni

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"syscall"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// ADD's kernel work is a dozen rtnetlink requests; the netlink library
// sends each on its own and waits for its answer. Requests that do not
// depend on each other's answers go here in one write instead: the kernel
// processes a batch in order, within the send, and queues one answer per
// request.

// rtnlConn is a blocking route netlink socket. The netlink library's
// sockets are non-blocking and go through the runtime's poller: every
// answer then costs a park, an epoll wait on another thread and a wake-up,
// which on a busy node adds up to a good part of a CNI command. A blocking
// receive just waits in the kernel.
type rtnlConn struct{ fd int }

// rtnlSocket opens a route netlink socket in the namespace of podNS, or in
// the calling thread's namespace when podNS is nil.
func rtnlSocket(podNS ns.NetNS) (*rtnlConn, error) {
	if podNS == nil {
		return newRtnlConn()
	}
	var c *rtnlConn
	err := inNetns(int(podNS.Fd()), func() (err error) {
		c, err = newRtnlConn()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open netlink in %s: %w", podNS.Path(), err)
	}
	return c, nil
}

func newRtnlConn() (*rtnlConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &rtnlConn{fd: fd}, nil
}

// inNetns runs fn on the calling thread switched into the network
// namespace nsFd, and switches back. If switching back fails, the thread
// stays locked to the goroutine (which gets the error), so the runtime
// never hands it to another goroutine in the wrong namespace.
func inNetns(nsFd int, fn func() error) error {
	runtime.LockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(self)
	if err := unix.Setns(nsFd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("return to network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func (c *rtnlConn) Close() { unix.Close(c.fd) }

func (c *rtnlConn) receive(buf []byte) ([]syscall.NetlinkMessage, error) {
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return syscall.ParseNetlinkMessage(buf[:n])
	}
}

// exec sends one request (with NLM_F_ACK) and waits for its answer; a
// failure is the bare errno.
func (c *rtnlConn) exec(req *nl.NetlinkRequest, echoType uint16) ([][]byte, error) {
	return sendBatch(c, []*nl.NetlinkRequest{req}, []string{""}, []syscall.Errno{0}, echoType)
}

// getLink looks a link up by name (with index 0) or by index, and
// decodes it as the netlink library does. A missing link is ENODEV.
func (c *rtnlConn) getLink(name string, index int) (netlink.Link, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF)))
	if index == 0 {
		if len(name) > 15 {
			req.AddData(nl.NewRtAttr(unix.IFLA_ALT_IFNAME, nl.ZeroTerminated(name)))
		} else {
			req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
		}
	}
	msgs, err := c.exec(req, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("look up link %q (index %d): %d answers", name, index, len(msgs))
	}
	return netlink.LinkDeserialize(nil, msgs[0])
}

// setLink changes a link's name (if name is set) and takes it down (if
// down), in one request.
func (c *rtnlConn) setLink(index int, name string, down bool) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	if down {
		msg.Change = unix.IFF_UP
	}
	req.AddData(msg)
	if name != "" {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	}
	_, err := c.exec(req, 0)
	return err
}

// delLink deletes a link by index.
func (c *rtnlConn) delLink(index int) error {
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	_, err := c.exec(req, 0)
	return err
}

// sendBatch sends reqs (each with NLM_F_ACK) in one write and waits for all
// their acknowledgements. It returns the first failure, naming the request
// by what[i], and the bodies of any answers of type echoType (NLM_F_ECHO).
// A request whose failure is in ignore[i] counts as done; one whose what[i]
// is empty fails with the bare errno.
func sendBatch(s *rtnlConn, reqs []*nl.NetlinkRequest, what []string, ignore []syscall.Errno, echoType uint16) ([][]byte, error) {
	var buf []byte
	pending := make(map[uint32]int, len(reqs))
	for i, r := range reqs {
		buf = append(buf, r.Serialize()...)
		pending[r.Seq] = i
	}
	if err := unix.Sendto(s.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send netlink batch: %w", err)
	}
	var echoes [][]byte
	var first error
	firstIdx := len(reqs)
	rb := make([]byte, 1<<16)
	for len(pending) > 0 {
		msgs, err := s.receive(rb)
		if err != nil {
			return nil, fmt.Errorf("receive netlink answers: %w", err)
		}
		for _, m := range msgs {
			i, ok := pending[m.Header.Seq]
			if !ok {
				continue
			}
			switch m.Header.Type {
			case echoType:
				echoes = append(echoes, slices.Clone(m.Data))
			case unix.NLMSG_ERROR:
				delete(pending, m.Header.Seq)
				errno := syscall.Errno(-int32(binary.NativeEndian.Uint32(m.Data[:4])))
				if errno != 0 && errno != ignore[i] && i < firstIdx {
					first, firstIdx = errno, i
					if what[i] != "" {
						first = fmt.Errorf("%s: %w", what[i], errno)
					}
				}
			}
		}
	}
	return echoes, first
}

// batch collects requests for sendBatch.
type batch struct {
	reqs   []*nl.NetlinkRequest
	what   []string
	ignore []syscall.Errno
}

func (b *batch) add(r *nl.NetlinkRequest, what string, ignore syscall.Errno) {
	b.reqs, b.what, b.ignore = append(b.reqs, r), append(b.what, what), append(b.ignore, ignore)
}

func (b *batch) send(s *rtnlConn, echoType uint16) ([][]byte, error) {
	return sendBatch(s, b.reqs, b.what, b.ignore, echoType)
}

// setUpRequest brings a link up.
func setUpRequest(index int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	msg.Flags, msg.Change = unix.IFF_UP, unix.IFF_UP
	req.AddData(msg)
	return req
}

// addrRequest adds an allocation's address; IPv6 ones skip DAD, and IPv4
// ones get the broadcast address, as iproute2 and the netlink library do.
func addrRequest(index int, a hostlocal.Allocation) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	ip := a.Address.Addr()
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	msg := nl.NewIfAddrmsg(family)
	msg.Index = uint32(index)
	msg.Prefixlen = uint8(a.Address.Bits())
	if ip.Is6() {
		msg.Flags = unix.IFA_F_NODAD
	}
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, ip.AsSlice()))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, ip.AsSlice()))
	if ip.Is4() && a.Address.Bits() < 31 {
		req.AddData(nl.NewRtAttr(unix.IFA_BROADCAST, broadcast(a.Address).AsSlice()))
	}
	return req
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	v := binary.BigEndian.Uint32(b[:]) | host
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// routeRequest adds a route out of index via gw.
func routeRequest(index int, r *types.Route, gw net.IP) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	msg := nl.NewRtMsg()
	dst, _ := ipNetToPrefix(r.Dst)
	msg.Family = unix.AF_INET
	if dst.Addr().Is6() {
		msg.Family = unix.AF_INET6
	}
	msg.Dst_len = uint8(dst.Bits())
	if r.Scope != nil {
		msg.Scope = uint8(*r.Scope)
	}
	table := unix.RT_TABLE_MAIN
	if r.Table != nil {
		table = *r.Table
	}
	if table < 256 {
		msg.Table = uint8(table)
	} else {
		msg.Table = unix.RT_TABLE_UNSPEC
	}
	req.AddData(msg)
	if dst.Bits() > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_DST, dst.Addr().AsSlice()))
	}
	if table >= 256 {
		req.AddData(nl.NewRtAttr(unix.RTA_TABLE, nl.Uint32Attr(uint32(table))))
	}
	if gw != nil {
		if g, ok := netip.AddrFromSlice(gw); ok {
			req.AddData(nl.NewRtAttr(unix.RTA_GATEWAY, g.Unmap().AsSlice()))
		}
	}
	req.AddData(nl.NewRtAttr(unix.RTA_OIF, nl.Uint32Attr(uint32(index))))
	if r.Priority > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_PRIORITY, nl.Uint32Attr(uint32(r.Priority))))
	}
	if r.MTU > 0 || r.AdvMSS > 0 {
		metrics := nl.NewRtAttr(unix.RTA_METRICS, nil)
		if r.MTU > 0 {
			metrics.AddRtAttr(unix.RTAX_MTU, nl.Uint32Attr(uint32(r.MTU)))
		}
		if r.AdvMSS > 0 {
			metrics.AddRtAttr(unix.RTAX_ADVMSS, nl.Uint32Attr(uint32(r.AdvMSS)))
		}
		req.AddData(metrics)
	}
	return req
}
