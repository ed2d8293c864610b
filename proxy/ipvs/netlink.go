package ipvs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nlmsg"
	"github.com/nodenet/nodenet/proxy"
)

// Generic netlink and IPVS constants (linux/genetlink.h, linux/ip_vs.h).
const (
	genlIDCtrl           = 0x10
	ctrlCmdGetFamily     = 3
	ctrlAttrFamilyID     = 1
	ctrlAttrFamilyName   = 2
	ipvsFamilyName       = "IPVS"
	ipvsGenlVersion      = 1
	ipvsCmdNewService    = 1
	ipvsCmdSetService    = 2
	ipvsCmdDelService    = 3
	ipvsCmdGetService    = 4
	ipvsCmdNewDest       = 5
	ipvsCmdSetDest       = 6
	ipvsCmdDelDest       = 7
	ipvsCmdGetDest       = 8
	ipvsCmdSetConfig     = 12
	ipvsCmdGetConfig     = 13
	ipvsCmdAttrService   = 1
	ipvsCmdAttrDest      = 2
	ipvsCmdAttrTCP       = 4
	ipvsCmdAttrTCPFin    = 5
	ipvsCmdAttrUDP       = 6
	ipvsSvcAttrAF        = 1
	ipvsSvcAttrProtocol  = 2
	ipvsSvcAttrAddr      = 3
	ipvsSvcAttrPort      = 4
	ipvsSvcAttrSchedName = 6
	ipvsSvcAttrFlags     = 7
	ipvsSvcAttrTimeout   = 8
	ipvsSvcAttrNetmask   = 9
	ipvsDestAttrAddr     = 1
	ipvsDestAttrPort     = 2
	ipvsDestAttrFwd      = 3
	ipvsDestAttrWeight   = 4
	ipvsDestAttrUThresh  = 5
	ipvsDestAttrLThresh  = 6
	ipvsDestAttrActive   = 7
	ipvsDestAttrInact    = 8
	ipvsDestAttrAF       = 11
	// ipvsConnFMasq is IP_VS_CONN_F_MASQ: NAT forwarding.
	ipvsConnFMasq = 0

	receiveTimeout = 5 * time.Second
)

// ProcIPVS exists when the ip_vs module is loaded (or built in).
const ProcIPVS = "/proc/net/ip_vs"

// Netlink is a Handle over a generic netlink socket.
type Netlink struct {
	conn   *nlmsg.Conn
	family uint16
	w      nlmsg.Writer
	// bigBuffer: the socket's receive buffer was raised (rcvBuffer), so
	// a request may carry more writes (applyChunk).
	bigBuffer bool
	stats     NetlinkStats
}

// rcvBuffer is the receive buffer asked for (SO_RCVBUFFORCE, root's):
// every write of a request is acknowledged before the first answer is
// read, each acknowledgement a socket buffer of its own.
const rcvBuffer = 4 << 20

// Open opens the IPVS table of the network namespace at netnsPath (""
// for the caller's). A kernel without IPVS yields ErrNoIPVS, never a
// handle that silently programs nothing.
func Open(netnsPath string) (*Netlink, error) {
	var n *Netlink
	open := func() error {
		c, err := nlmsg.Dial(unix.NETLINK_GENERIC)
		if err != nil {
			return err
		}
		if err := c.SetReceiveTimeout(receiveTimeout); err != nil {
			c.Close()
			return err
		}
		n = &Netlink{conn: c}
		n.bigBuffer = c.SetReceiveBuffer(rcvBuffer) == nil
		n.family, err = n.resolveFamily()
		_, statErr := os.Stat(ProcIPVS)
		if err != nil {
			c.Close()
			if errors.Is(err, unix.ENOENT) && statErr != nil {
				return ErrNoIPVS
			}
			return fmt.Errorf("resolve the IPVS generic netlink family: %w", err)
		}
		return nil
	}
	var err error
	if netnsPath != "" {
		err = netnsutil.Do(netnsPath, open)
	} else {
		err = open()
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// Close closes the socket.
func (n *Netlink) Close() error { return n.conn.Close() }

// begin starts a message in n.w, after those already there (a request
// of many writes); request starts a request of one message.
func (n *Netlink) begin(family uint16, cmd uint8, flags uint16) {
	n.w.Begin(family, flags)
	version := uint8(ipvsGenlVersion)
	if family == genlIDCtrl {
		version = 1
	}
	n.w.Fixed([]byte{cmd, version, 0, 0})
}

func (n *Netlink) request(family uint16, cmd uint8, flags uint16) {
	n.w.Reset()
	n.begin(family, cmd, flags)
}

func (n *Netlink) resolveFamily() (uint16, error) {
	n.request(genlIDCtrl, ctrlCmdGetFamily, unix.NLM_F_ACK)
	n.w.String(ctrlAttrFamilyName, ipvsFamilyName)
	var id uint16
	err := n.conn.Execute(&n.w, func(r nlmsg.Reply) error {
		attrs, err := nlmsg.ParseAttrs(genlBody(r.Data))
		for _, a := range attrs {
			if a.Type == ctrlAttrFamilyID && len(a.Value) >= 2 {
				id = binary.NativeEndian.Uint16(a.Value)
			}
		}
		return err
	})
	if err == nil && id == 0 {
		err = errors.New("no family id in the answer")
	}
	return id, err
}

// genlBody skips the genlmsghdr.
func genlBody(b []byte) []byte {
	if len(b) < 4 {
		return nil
	}
	return b[4:]
}

func ipvsAF(a netip.Addr) uint16 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func ipvsProto(p proxy.Protocol) uint16 {
	switch p {
	case proxy.UDP:
		return unix.IPPROTO_UDP
	case proxy.SCTP:
		return unix.IPPROTO_SCTP
	}
	return unix.IPPROTO_TCP
}

func protoName(p uint16) (proxy.Protocol, bool) {
	switch p {
	case unix.IPPROTO_TCP:
		return proxy.TCP, true
	case unix.IPPROTO_UDP:
		return proxy.UDP, true
	case unix.IPPROTO_SCTP:
		return proxy.SCTP, true
	}
	return "", false
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

func u16(v uint16) []byte { return binary.NativeEndian.AppendUint16(nil, v) }

// serviceKeyAttrs writes the attributes that identify a virtual server.
func (n *Netlink) serviceKeyAttrs(k ServiceKey) {
	n.w.Attr(ipvsSvcAttrAF, u16(ipvsAF(k.Addr)))
	n.w.Attr(ipvsSvcAttrProtocol, u16(ipvsProto(k.Protocol)))
	n.w.Attr(ipvsSvcAttrAddr, k.Addr.AsSlice())
	n.w.Attr(ipvsSvcAttrPort, be16(k.Port))
}

// encodeService appends a virtual-server message to n.w.
func (n *Netlink) encodeService(cmd uint8, s Service) {
	n.begin(n.family, cmd, unix.NLM_F_ACK)
	nest := n.w.Nest(ipvsCmdAttrService | unix.NLA_F_NESTED)
	n.serviceKeyAttrs(s.Key())
	if cmd != ipvsCmdDelService {
		n.w.String(ipvsSvcAttrSchedName, s.Scheduler)
		flags := make([]byte, 8)
		binary.NativeEndian.PutUint32(flags, s.Flags)
		binary.NativeEndian.PutUint32(flags[4:], ^uint32(0))
		n.w.Attr(ipvsSvcAttrFlags, flags)
		n.w.Uint32(ipvsSvcAttrTimeout, uint32(s.Timeout/time.Second))
		netmask := uint32(0xffffffff)
		if s.Addr.Is6() {
			netmask = 128
		}
		n.w.Uint32(ipvsSvcAttrNetmask, netmask)
	}
	n.w.EndNest(nest)
}

// AddService creates a virtual server (EEXIST if it exists).
func (n *Netlink) AddService(s Service) error {
	return n.one(Op{Kind: OpAddService, Svc: s})
}

// UpdateService changes a virtual server's scheduler, flags and timeout
// (ESRCH if it does not exist).
func (n *Netlink) UpdateService(s Service) error {
	return n.one(Op{Kind: OpUpdateService, Svc: s})
}

// DeleteService removes a virtual server and its real servers (ESRCH if
// it does not exist).
func (n *Netlink) DeleteService(k ServiceKey) error {
	return n.one(Op{Kind: OpDeleteService, Svc: serviceOf(k)})
}

// one applies a single op with its errno reported, not tolerated.
func (n *Netlink) one(op Op) error {
	n.w.Reset()
	if err := n.encode(op, false); err != nil {
		return err
	}
	return wrap(op.String(), n.execute())
}

// execute sends what n.w holds and counts the request.
func (n *Netlink) execute() error {
	n.stats.Requests++
	n.stats.Messages += n.w.Count()
	return n.conn.Execute(&n.w, nil)
}

// applyChunk bounds the messages of one request: their acknowledgements
// queue up in the socket's receive buffer before the first is read.
func (n *Netlink) applyChunk() int {
	if n.bigBuffer {
		return 256
	}
	return 32
}

// Apply implements Handle: up to applyChunk writes per request.
func (n *Netlink) Apply(ops []Op) error {
	var first error
	for len(ops) > 0 {
		chunk := ops[:min(len(ops), n.applyChunk())]
		ops = ops[len(chunk):]
		n.w.Reset()
		for _, op := range chunk {
			if err := n.encode(op, true); err != nil {
				return errors.Join(first, err)
			}
		}
		err := n.execute()
		var refused *nlmsg.Error
		switch {
		case errors.As(err, &refused) && refused.Index < len(chunk):
			first = cmp.Or(first, fmt.Errorf("%s: %w", chunk[refused.Index], refused))
		case err != nil:
			// The socket failed: what the kernel made of this request is
			// unknown, and the rest is not sent.
			return errors.Join(first, fmt.Errorf("ipvs request of %d writes: %w", len(chunk), err))
		}
	}
	return first
}

// encode appends op's message to n.w; tolerant makes the errnos of
// deleting what is gone count as done.
func (n *Netlink) encode(op Op, tolerant bool) error {
	if err := op.validate(); err != nil {
		return err
	}
	k := op.Svc.Key()
	switch op.Kind {
	case OpAddService:
		n.encodeService(ipvsCmdNewService, op.Svc)
	case OpUpdateService:
		n.encodeService(ipvsCmdSetService, op.Svc)
	case OpDeleteService:
		n.encodeService(ipvsCmdDelService, op.Svc)
		if tolerant {
			n.w.Tolerate(unix.ESRCH)
		}
	case OpAddDestination:
		n.encodeDest(ipvsCmdNewDest, k, op.Dest, true)
	case OpUpdateDestination:
		n.encodeDest(ipvsCmdSetDest, k, op.Dest, true)
	case OpDeleteDestination:
		n.encodeDest(ipvsCmdDelDest, k, op.Dest, false)
		if tolerant {
			n.w.Tolerate(unix.ENOENT)
		}
	}
	return nil
}

// NetlinkStats count what a Netlink sent: requests (one write each, a
// dump included), the messages in them, and the dumps of every service.
type NetlinkStats struct {
	Requests, Messages, Dumps int
}

// Stats are the counts since Open.
func (n *Netlink) Stats() NetlinkStats { return n.stats }

// Service reads one virtual server.
func (n *Netlink) Service(k ServiceKey) (Service, bool, error) {
	n.request(n.family, ipvsCmdGetService, unix.NLM_F_ACK)
	nest := n.w.Nest(ipvsCmdAttrService | unix.NLA_F_NESTED)
	n.serviceKeyAttrs(k)
	n.w.EndNest(nest)
	var out Service
	found := false
	n.stats.Requests++
	n.stats.Messages++
	err := n.conn.Execute(&n.w, func(r nlmsg.Reply) error {
		s, ok, err := parseService(genlBody(r.Data))
		if ok && s.Key() == k {
			out, found = s, true
		}
		return err
	})
	if errors.Is(err, unix.ESRCH) {
		return Service{}, false, nil
	}
	if err != nil {
		return Service{}, false, fmt.Errorf("read ipvs service %s: %w", k, err)
	}
	return out, found, nil
}

// Services lists the virtual servers (those with a firewall mark instead
// of an address are not nodenet's and are left out).
func (n *Netlink) Services() ([]Service, error) {
	n.request(n.family, ipvsCmdGetService, unix.NLM_F_DUMP)
	n.countDump(true)
	bodies, err := n.conn.Dump(&n.w, n.family)
	if err != nil {
		return nil, fmt.Errorf("list ipvs services: %w", err)
	}
	var out []Service
	for _, b := range bodies {
		s, ok, err := parseService(genlBody(b))
		if err != nil {
			return nil, fmt.Errorf("list ipvs services: %w", err)
		}
		if ok {
			out = append(out, s)
		}
	}
	return out, nil
}

func parseService(b []byte) (Service, bool, error) {
	var s Service
	attrs, err := nlmsg.ParseAttrs(b)
	if err != nil {
		return s, false, err
	}
	for _, a := range attrs {
		if a.Type != ipvsCmdAttrService {
			continue
		}
		inner, err := nlmsg.ParseAttrs(a.Value)
		if err != nil {
			return s, false, err
		}
		var af, proto uint16
		var addr []byte
		for _, x := range inner {
			switch x.Type {
			case ipvsSvcAttrAF:
				af = binary.NativeEndian.Uint16(x.Value)
			case ipvsSvcAttrProtocol:
				proto = binary.NativeEndian.Uint16(x.Value)
			case ipvsSvcAttrAddr:
				addr = x.Value
			case ipvsSvcAttrPort:
				s.Port = binary.BigEndian.Uint16(x.Value)
			case ipvsSvcAttrSchedName:
				s.Scheduler = nlmsg.String(x.Value)
			case ipvsSvcAttrFlags:
				s.Flags = nlmsg.Uint32(x.Value) &^ flagHashed
			case ipvsSvcAttrTimeout:
				s.Timeout = time.Duration(nlmsg.Uint32(x.Value)) * time.Second
			}
		}
		var ok bool
		s.Protocol, ok = protoName(proto)
		s.Addr = parseAddr(af, addr)
		return s, ok && s.Addr.IsValid(), nil
	}
	return s, false, nil
}

func parseAddr(af uint16, b []byte) netip.Addr {
	switch {
	case af == unix.AF_INET && len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4]))
	case af == unix.AF_INET6 && len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16]))
	}
	return netip.Addr{}
}

func (n *Netlink) encodeDest(cmd uint8, k ServiceKey, d Destination, full bool) {
	n.begin(n.family, cmd, unix.NLM_F_ACK)
	nest := n.w.Nest(ipvsCmdAttrService | unix.NLA_F_NESTED)
	n.serviceKeyAttrs(k)
	n.w.EndNest(nest)
	nest = n.w.Nest(ipvsCmdAttrDest | unix.NLA_F_NESTED)
	n.w.Attr(ipvsDestAttrAF, u16(ipvsAF(d.Addr)))
	n.w.Attr(ipvsDestAttrAddr, d.Addr.AsSlice())
	n.w.Attr(ipvsDestAttrPort, be16(d.Port))
	if full {
		n.w.Uint32(ipvsDestAttrFwd, ipvsConnFMasq)
		n.w.Uint32(ipvsDestAttrWeight, uint32(d.Weight))
		n.w.Uint32(ipvsDestAttrUThresh, 0)
		n.w.Uint32(ipvsDestAttrLThresh, 0)
	}
	n.w.EndNest(nest)
}

func (d Destination) validate(k ServiceKey) error {
	if !d.Addr.IsValid() || d.Addr.Is4() != k.Addr.Is4() {
		return fmt.Errorf("ipvs destination %s of %s: address of another family (IPVS NAT does not translate families)", d.Key(), k)
	}
	if d.Weight < 0 {
		return fmt.Errorf("ipvs destination %s of %s: negative weight %d", d.Key(), k, d.Weight)
	}
	return nil
}

// AddDestination adds a real server (EEXIST if it exists; ESRCH without
// the service).
func (n *Netlink) AddDestination(k ServiceKey, d Destination) error {
	return n.one(Op{Kind: OpAddDestination, Svc: serviceOf(k), Dest: d})
}

// UpdateDestination changes a real server's weight (ENOENT if it does not
// exist).
func (n *Netlink) UpdateDestination(k ServiceKey, d Destination) error {
	return n.one(Op{Kind: OpUpdateDestination, Svc: serviceOf(k), Dest: d})
}

// DeleteDestination removes a real server (ENOENT if it does not exist).
func (n *Netlink) DeleteDestination(k ServiceKey, ap netip.AddrPort) error {
	return n.one(Op{Kind: OpDeleteDestination, Svc: serviceOf(k), Dest: Destination{Addr: ap.Addr(), Port: ap.Port()}})
}

// serviceOf is the Service with key k only (what a destination's or a
// deletion's message names).
func serviceOf(k ServiceKey) Service {
	return Service{Addr: k.Addr, Port: k.Port, Protocol: k.Protocol}
}

// Destinations lists a virtual server's real servers with their
// connection counts.
func (n *Netlink) Destinations(k ServiceKey) ([]Destination, error) {
	n.request(n.family, ipvsCmdGetDest, unix.NLM_F_DUMP)
	nest := n.w.Nest(ipvsCmdAttrService | unix.NLA_F_NESTED)
	n.serviceKeyAttrs(k)
	n.w.EndNest(nest)
	n.countDump(false)
	bodies, err := n.conn.Dump(&n.w, n.family)
	if err != nil {
		return nil, fmt.Errorf("list ipvs destinations of %s: %w", k, err)
	}
	var out []Destination
	for _, b := range bodies {
		attrs, err := nlmsg.ParseAttrs(genlBody(b))
		if err != nil {
			return nil, fmt.Errorf("list ipvs destinations of %s: %w", k, err)
		}
		for _, a := range attrs {
			if a.Type != ipvsCmdAttrDest {
				continue
			}
			inner, err := nlmsg.ParseAttrs(a.Value)
			if err != nil {
				return nil, fmt.Errorf("list ipvs destinations of %s: %w", k, err)
			}
			af := ipvsAF(k.Addr)
			var d Destination
			var addr []byte
			for _, x := range inner {
				switch x.Type {
				case ipvsDestAttrAF:
					af = binary.NativeEndian.Uint16(x.Value)
				case ipvsDestAttrAddr:
					addr = x.Value
				case ipvsDestAttrPort:
					d.Port = binary.BigEndian.Uint16(x.Value)
				case ipvsDestAttrWeight:
					d.Weight = int(nlmsg.Uint32(x.Value))
				case ipvsDestAttrActive:
					d.ActiveConns = nlmsg.Uint32(x.Value)
				case ipvsDestAttrInact:
					d.InactiveConns = nlmsg.Uint32(x.Value)
				}
			}
			d.Addr = parseAddr(af, addr)
			out = append(out, d)
		}
	}
	return out, nil
}

// countDump counts a dump request; services: one listing every service.
func (n *Netlink) countDump(services bool) {
	n.stats.Requests++
	n.stats.Messages++
	if services {
		n.stats.Dumps++
	}
}

// Timeouts reads the connection timeouts.
func (n *Netlink) Timeouts() (Timeouts, error) {
	n.request(n.family, ipvsCmdGetConfig, unix.NLM_F_ACK)
	var t Timeouts
	err := n.conn.Execute(&n.w, func(r nlmsg.Reply) error {
		attrs, err := nlmsg.ParseAttrs(genlBody(r.Data))
		for _, a := range attrs {
			v := time.Duration(nlmsg.Uint32(a.Value)) * time.Second
			switch a.Type {
			case ipvsCmdAttrTCP:
				t.TCP = v
			case ipvsCmdAttrTCPFin:
				t.TCPFin = v
			case ipvsCmdAttrUDP:
				t.UDP = v
			}
		}
		return err
	})
	return t, wrap("read ipvs timeouts", err)
}

// SetTimeouts sets the non-zero timeouts (whole seconds).
func (n *Netlink) SetTimeouts(t Timeouts) error {
	for _, v := range []time.Duration{t.TCP, t.TCPFin, t.UDP} {
		if v < 0 || v%time.Second != 0 {
			return fmt.Errorf("set ipvs timeouts: %v is not a whole, non-negative number of seconds", v)
		}
	}
	n.request(n.family, ipvsCmdSetConfig, unix.NLM_F_ACK)
	n.w.Uint32(ipvsCmdAttrTCP, uint32(t.TCP/time.Second))
	n.w.Uint32(ipvsCmdAttrTCPFin, uint32(t.TCPFin/time.Second))
	n.w.Uint32(ipvsCmdAttrUDP, uint32(t.UDP/time.Second))
	return wrap("set ipvs timeouts", n.conn.Execute(&n.w, nil))
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

var _ Handle = (*Netlink)(nil)
