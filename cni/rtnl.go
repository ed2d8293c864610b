package cni

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// ADD's kernel work is a dozen rtnetlink requests; the netlink library
// sends each on its own and waits for its answer. Requests that do not
// depend on each other's answers go here in one write instead: the kernel
// processes a batch in order, within the send, and queues one answer per
// request.

// rtnlSocket opens a route netlink socket in the namespace of podNS, or in
// the calling thread's namespace when podNS is nil.
func rtnlSocket(podNS ns.NetNS) (*nl.NetlinkSocket, error) {
	target := netns.None()
	if podNS != nil {
		target = netns.NsHandle(podNS.Fd())
	}
	s, err := nl.GetNetlinkSocketAt(target, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return s, nil
}

// sendBatch sends reqs (each with NLM_F_ACK) in one write and waits for all
// their acknowledgements. It returns the first failure, naming the request
// by what[i], and the bodies of any answers of type echoType (NLM_F_ECHO).
// A request whose failure is in ignore[i] counts as done.
func sendBatch(s *nl.NetlinkSocket, reqs []*nl.NetlinkRequest, what []string, ignore []syscall.Errno, echoType uint16) ([][]byte, error) {
	var buf []byte
	pending := make(map[uint32]int, len(reqs))
	for i, r := range reqs {
		buf = append(buf, r.Serialize()...)
		pending[r.Seq] = i
	}
	if err := unix.Sendto(s.GetFd(), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send netlink batch: %w", err)
	}
	var echoes [][]byte
	var first error
	firstIdx := len(reqs)
	for len(pending) > 0 {
		msgs, _, err := s.Receive()
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
				echoes = append(echoes, m.Data)
			case unix.NLMSG_ERROR:
				delete(pending, m.Header.Seq)
				errno := syscall.Errno(-int32(binary.NativeEndian.Uint32(m.Data[:4])))
				if errno != 0 && errno != ignore[i] && i < firstIdx {
					first, firstIdx = fmt.Errorf("%s: %w", what[i], errno), i
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

func (b *batch) send(s *nl.NetlinkSocket, echoType uint16) ([][]byte, error) {
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
