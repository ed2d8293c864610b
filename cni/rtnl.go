package cni

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// ADD's kernel work is a dozen rtnetlink requests; the netlink library
// would send each on its own and wait for its answer. Requests that do not
// depend on each other's answers go here in one write instead: the kernel
// processes a batch in order, within the send, and queues one answer per
// request.

// rtnlConn is a blocking route netlink socket. The netlink library's
// sockets are non-blocking and go through the runtime's poller: every
// answer then costs a park, an epoll wait on another thread and a wake-up,
// which on a busy node adds up to a good part of a CNI command. A blocking
// receive just waits in the kernel.
type rtnlConn struct {
	fd int
	// buf receives answers. One per socket, not per request: a fresh
	// 64 KiB buffer per request was a good share of a command's
	// allocations.
	buf []byte
}

// rtnlBufSize fits any answer to the requests sent here (acks, and one
// link for lookups and echoes); a larger one is reported, not cut short.
const rtnlBufSize = 32 << 10

// rtnlSocket opens a route netlink socket in the namespace of podNS, or in
// the calling thread's namespace when podNS is nil. A socket PreparePod
// opened in podNS is used instead, once.
func rtnlSocket(podNS *netNS) (*rtnlConn, error) {
	if podNS == nil {
		return newRtnlConn()
	}
	if c := podNS.rtnl; c != nil {
		podNS.rtnl = nil
		return c, nil
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

// receive reads the next datagram of answers. The messages alias the
// connection's buffer until the next receive.
func (c *rtnlConn) receive() ([]syscall.NetlinkMessage, error) {
	if c.buf == nil {
		c.buf = make([]byte, rtnlBufSize)
	}
	for {
		n, _, flags, _, err := unix.Recvmsg(c.fd, c.buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if flags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("netlink answer larger than %d bytes", len(c.buf))
		}
		return syscall.ParseNetlinkMessage(c.buf[:n])
	}
}

// exec sends one request (with NLM_F_ACK) and waits for its answer; a
// failure is the bare errno.
func (c *rtnlConn) exec(req *request, echoType uint16) ([][]byte, error) {
	return sendBatch(c, []*request{req}, []string{""}, []syscall.Errno{0}, echoType)
}

// setLink changes a link's name (if name is set) and takes it down (if
// down), in one request.
func (c *rtnlConn) setLink(index int, name string, down bool) error {
	var change uint32
	if down {
		change = unix.IFF_UP
	}
	req := newRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, index, 0, change))
	if name != "" {
		req.attr(unix.IFLA_IFNAME, cstr(name))
	}
	_, err := c.exec(req, 0)
	return err
}

// setFlags sets the interface flags in mask to those in flags.
func (c *rtnlConn) setFlags(index int, flags, mask uint32) error {
	_, err := c.exec(newRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, index, flags, mask)), 0)
	return err
}

// delLink deletes a link by index.
func (c *rtnlConn) delLink(index int) error {
	_, err := c.exec(newRequest(unix.RTM_DELLINK, unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, index, 0, 0)), 0)
	return err
}

// sendBatch sends reqs (each with NLM_F_ACK) in one write and waits for all
// their acknowledgements. It returns the first failure, naming the request
// by what[i], and the bodies of any answers of type echoType (NLM_F_ECHO).
// A request whose failure is in ignore[i] counts as done; one whose what[i]
// is empty fails with the bare errno.
func sendBatch(s *rtnlConn, reqs []*request, what []string, ignore []syscall.Errno, echoType uint16) ([][]byte, error) {
	var buf []byte
	pending := make(map[uint32]int, len(reqs))
	for i, r := range reqs {
		buf = append(buf, r.serialize()...)
		pending[r.seq] = i
	}
	if err := unix.Sendto(s.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send netlink batch: %w", err)
	}
	var echoes [][]byte
	var first error
	firstIdx := len(reqs)
	for len(pending) > 0 {
		msgs, err := s.receive()
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
				errno := syscall.Errno(-int32(native.Uint32(m.Data[:4])))
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
	reqs   []*request
	what   []string
	ignore []syscall.Errno
}

func (b *batch) add(r *request, what string, ignore syscall.Errno) {
	b.reqs, b.what, b.ignore = append(b.reqs, r), append(b.what, what), append(b.ignore, ignore)
}

func (b *batch) send(s *rtnlConn, echoType uint16) ([][]byte, error) {
	return sendBatch(s, b.reqs, b.what, b.ignore, echoType)
}

// setUpRequest brings a link up.
func setUpRequest(index int) *request {
	return newRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, index, unix.IFF_UP, unix.IFF_UP))
}

// addrRequest adds an allocation's address; IPv6 ones skip DAD, and IPv4
// ones get the broadcast address, as iproute2 and the netlink library do.
func addrRequest(index int, a hostlocal.Allocation) *request {
	ip := a.Address.Addr()
	req := newRequest(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	if ip.Is6() {
		req.add(ifaddrmsg(unix.AF_INET6, uint8(a.Address.Bits()), unix.IFA_F_NODAD, index))
	} else {
		req.add(ifaddrmsg(unix.AF_INET, uint8(a.Address.Bits()), 0, index))
	}
	req.attr(unix.IFA_LOCAL, ip.AsSlice()).attr(unix.IFA_ADDRESS, ip.AsSlice())
	if ip.Is4() && a.Address.Bits() < 31 {
		req.attr(unix.IFA_BROADCAST, broadcast(a.Address).AsSlice())
	}
	return req
}

// addrDelRequest removes an address.
func addrDelRequest(index int, p netip.Prefix) *request {
	family := uint8(unix.AF_INET)
	if p.Addr().Is6() {
		family = unix.AF_INET6
	}
	return newRequest(unix.RTM_DELADDR, unix.NLM_F_ACK).add(ifaddrmsg(family, uint8(p.Bits()), 0, index)).
		attr(unix.IFA_LOCAL, p.Addr().AsSlice()).attr(unix.IFA_ADDRESS, p.Addr().AsSlice())
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	v := binary.BigEndian.Uint32(b[:]) | host
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// routeRequest adds a route out of index via gw.
func routeRequest(index int, r *Route, gw netip.Addr) *request {
	dst := r.Dst
	family := uint8(unix.AF_INET)
	if dst.Addr().Is6() {
		family = unix.AF_INET6
	}
	var scope uint8
	if r.Scope != nil {
		scope = uint8(*r.Scope)
	}
	table := unix.RT_TABLE_MAIN
	if r.Table != nil {
		table = *r.Table
	}
	hdrTable := uint8(unix.RT_TABLE_UNSPEC)
	if table < 256 {
		hdrTable = uint8(table)
	}
	req := newRequest(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK).add(rtmsg(family, uint8(dst.Bits()), hdrTable, scope))
	if dst.Bits() > 0 {
		req.attr(unix.RTA_DST, dst.Addr().AsSlice())
	}
	if table >= 256 {
		req.attr(unix.RTA_TABLE, u32(uint32(table)))
	}
	if gw.IsValid() {
		req.attr(unix.RTA_GATEWAY, gw.Unmap().AsSlice())
	}
	req.attr(unix.RTA_OIF, u32(uint32(index)))
	if r.Priority > 0 {
		req.attr(unix.RTA_PRIORITY, u32(uint32(r.Priority)))
	}
	if r.MTU > 0 || r.AdvMSS > 0 {
		req.nested(unix.RTA_METRICS, func() {
			if r.MTU > 0 {
				req.attr(unix.RTAX_MTU, u32(uint32(r.MTU)))
			}
			if r.AdvMSS > 0 {
				req.attr(unix.RTAX_ADVMSS, u32(uint32(r.AdvMSS)))
			}
		})
	}
	return req
}
