package kernel

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

// Kernel constants golang.org/x/sys/unix does not name.
const (
	rtextFilterVF = 1 // RTEXT_FILTER_VF: include VF information in links
	vethInfoPeer  = 1 // VETH_INFO_PEER
)

// Link is what the plugin reads of a network interface.
type Link struct {
	Index int
	Name  string
	Alias string
	// Kind is the IFLA_INFO_KIND ("bridge", "veth"); "device" for a link
	// without one, as the netlink library calls it.
	Kind  string
	Flags uint32
	// Parent is IFLA_LINK: a veth end's peer.
	Parent  int
	Master  int
	MAC     MAC
	MTU     int
	Promisc uint32
	Group   uint32
}

// Up reports IFF_UP.
func (l *Link) Up() bool { return l.Flags&unix.IFF_UP != 0 }

// MAC is a hardware address, printed like net.HardwareAddr.
type MAC []byte

func (m MAC) String() string {
	var b strings.Builder
	for i, c := range m {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x", c)
	}
	return b.String()
}

// IsNotFound reports a link that does not exist.
func IsNotFound(err error) bool { return errors.Is(err, unix.ENODEV) }

// ifinfomsg is the fixed header of link messages.
func ifinfomsg(family uint8, index int, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = family
	native.PutUint32(b[4:], uint32(int32(index)))
	native.PutUint32(b[8:], flags)
	native.PutUint32(b[12:], change)
	return b
}

// Link looks a link up by name; a missing one is ENODEV.
func (c *Conn) Link(name string) (*Link, error) { return c.getLink(name, 0) }

// LinkByIndex looks a link up by index; a missing one is ENODEV.
func (c *Conn) LinkByIndex(index int) (*Link, error) { return c.getLink("", index) }

func (c *Conn) getLink(name string, index int) (*Link, error) {
	var w nlmsg.Writer
	w.Begin(unix.RTM_GETLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, index, 0, 0))
	w.Uint32(unix.IFLA_EXT_MASK, rtextFilterVF)
	if index == 0 {
		nameAttr := uint16(unix.IFLA_IFNAME)
		if len(name) > 15 {
			nameAttr = unix.IFLA_ALT_IFNAME
		}
		w.String(nameAttr, name)
	}
	msgs, err := c.exec(&w, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("look up link %q (index %d): %d answers", name, index, len(msgs))
	}
	return decodeLink(msgs[0])
}

// Links lists the links of the socket's namespace.
func (c *Conn) Links() ([]*Link, error) {
	w := dumpRequest(unix.RTM_GETLINK, ifinfomsg(unix.AF_UNSPEC, 0, 0, 0))
	w.Uint32(unix.IFLA_EXT_MASK, rtextFilterVF)
	msgs, err := c.dump("links", w, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	out := make([]*Link, 0, len(msgs))
	for _, m := range msgs {
		l, err := decodeLink(m)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// decodeLink decodes an RTM_NEWLINK body.
func decodeLink(m []byte) (*Link, error) {
	if len(m) < unix.SizeofIfInfomsg {
		return nil, fmt.Errorf("short link message (%d bytes)", len(m))
	}
	attrs, err := nlmsg.ParseAttrs(m[unix.SizeofIfInfomsg:])
	if err != nil {
		return nil, fmt.Errorf("decode link: %w", err)
	}
	l := &Link{Index: int(int32(native.Uint32(m[4:]))), Flags: native.Uint32(m[8:]), Kind: "device"}
	for _, a := range attrs {
		switch a.Type {
		case unix.IFLA_IFNAME:
			l.Name = nlmsg.String(a.Value)
		case unix.IFLA_IFALIAS:
			l.Alias = nlmsg.String(a.Value)
		case unix.IFLA_ADDRESS:
			if strings.Trim(string(a.Value), "\x00") != "" { // lo's is all zero: none
				l.MAC = MAC(append([]byte(nil), a.Value...))
			}
		case unix.IFLA_MTU:
			l.MTU = int(nlmsg.Uint32(a.Value))
		case unix.IFLA_LINK:
			l.Parent = int(nlmsg.Uint32(a.Value))
		case unix.IFLA_MASTER:
			l.Master = int(nlmsg.Uint32(a.Value))
		case unix.IFLA_PROMISCUITY:
			l.Promisc = nlmsg.Uint32(a.Value)
		case unix.IFLA_GROUP:
			l.Group = nlmsg.Uint32(a.Value)
		case unix.IFLA_LINKINFO:
			if kind := linkKind(a.Value); kind != "" {
				l.Kind = kind
			}
		}
	}
	return l, nil
}

// linkKind reads IFLA_INFO_KIND out of IFLA_LINKINFO.
func linkKind(linkInfo []byte) string {
	infos, err := nlmsg.ParseAttrs(linkInfo)
	if err == nil {
		for _, i := range infos {
			if i.Type == unix.IFLA_INFO_KIND {
				return nlmsg.String(i.Value)
			}
		}
	}
	return ""
}

// Hairpin reports whether a bridge port reflects traffic back out of
// itself (IFLA_BRPORT_MODE), from the bridge's view of its ports. A link
// that is no bridge port is ENODEV.
func (c *Conn) Hairpin(index int) (bool, error) {
	msgs, err := c.dump("bridge ports", dumpRequest(unix.RTM_GETLINK, ifinfomsg(unix.AF_BRIDGE, 0, 0, 0)), unix.RTM_NEWLINK)
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if len(m) < unix.SizeofIfInfomsg || int(int32(native.Uint32(m[4:]))) != index {
			continue
		}
		attrs, err := nlmsg.ParseAttrs(m[unix.SizeofIfInfomsg:])
		if err != nil {
			return false, err
		}
		for _, a := range attrs {
			if a.Type != unix.IFLA_PROTINFO {
				continue
			}
			port, err := nlmsg.ParseAttrs(a.Value)
			if err != nil {
				return false, err
			}
			for _, p := range port {
				if p.Type == unix.IFLA_BRPORT_MODE && len(p.Value) > 0 {
					return p.Value[0] == 1, nil
				}
			}
		}
	}
	return false, fmt.Errorf("port %d: %w", index, unix.ENODEV)
}

// CreateBridge creates a bridge, up and with a fixed MAC, optionally
// promiscuous. One that exists is EEXIST.
func (c *Conn) CreateBridge(name string, mtu int, hw MAC, promisc bool) error {
	flags := uint32(unix.IFF_UP)
	if promisc {
		flags |= unix.IFF_PROMISC
	}
	var w nlmsg.Writer
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, 0, flags, flags))
	w.String(unix.IFLA_IFNAME, name)
	w.Attr(unix.IFLA_ADDRESS, hw)
	if mtu > 0 {
		w.Uint32(unix.IFLA_MTU, uint32(mtu))
	}
	info := w.Nest(unix.IFLA_LINKINFO)
	w.Attr(unix.IFLA_INFO_KIND, []byte("bridge"))
	w.EndNest(info)
	_, err := c.exec(&w, 0)
	return err
}

// setUp brings a link up.
func setUp(w *nlmsg.Writer, index int) {
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, index, unix.IFF_UP, unix.IFF_UP))
}

// SetFlags sets the interface flags in mask to those in flags.
func (c *Conn) SetFlags(index int, flags, mask uint32) error {
	var w nlmsg.Writer
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, index, flags, mask))
	_, err := c.exec(&w, 0)
	return err
}

// setLink changes a link's name (if name is set) and takes it down (if
// down), in one request.
func (c *Conn) setLink(index int, name string, down bool) error {
	var change uint32
	if down {
		change = unix.IFF_UP
	}
	var w nlmsg.Writer
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, index, 0, change))
	if name != "" {
		w.String(unix.IFLA_IFNAME, name)
	}
	_, err := c.exec(&w, 0)
	return err
}

// Rename renames a link; kernels before 6.2 refuse to rename one that is
// up, so it is taken down first there.
func (c *Conn) Rename(index int, name string) error {
	err := c.setLink(index, name, false)
	if errors.Is(err, unix.EBUSY) {
		if err := c.setLink(index, "", true); err != nil {
			return err
		}
		err = c.setLink(index, name, false)
	}
	return err
}

// DeleteLink deletes a link by index.
func (c *Conn) DeleteLink(index int) error {
	var w nlmsg.Writer
	w.Begin(unix.RTM_DELLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, index, 0, 0))
	_, err := c.exec(&w, 0)
	return err
}

// SetDownInGroup takes a link down (cutting its veth peer off too) and
// moves it into interface group group, in one request.
func (c *Conn) SetDownInGroup(index int, group uint32) error {
	var w nlmsg.Writer
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, index, 0, unix.IFF_UP)) // change IFF_UP to off: down
	w.Uint32(unix.IFLA_GROUP, group)
	_, err := c.exec(&w, 0)
	return err
}

// DeleteGroup deletes every link in interface group group, in one request,
// and reports whether there were any.
func (c *Conn) DeleteGroup(group uint32) (bool, error) {
	var w nlmsg.Writer
	w.Begin(unix.RTM_DELLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, 0, 0, 0))
	w.Uint32(unix.IFLA_GROUP, group)
	_, err := c.exec(&w, 0)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENODEV):
		return false, nil
	default:
		return false, err
	}
}

// ConfigurePort sets the alias and, optionally, hairpin mode of a bridge
// port, addressed by name, in one request.
func (c *Conn) ConfigurePort(name, alias string, hairpin bool) error {
	var w nlmsg.Writer
	w.Begin(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	w.Fixed(ifinfomsg(unix.AF_UNSPEC, 0, 0, 0))
	w.String(unix.IFLA_IFNAME, name)
	w.Attr(unix.IFLA_IFALIAS, []byte(alias))
	if hairpin {
		info := w.Nest(unix.IFLA_LINKINFO)
		w.Attr(unix.IFLA_INFO_SLAVE_KIND, []byte("bridge"))
		data := w.Nest(unix.IFLA_INFO_SLAVE_DATA)
		w.Attr(unix.IFLA_BRPORT_MODE, []byte{1})
		w.EndNest(data)
		w.EndNest(info)
	}
	_, err := c.exec(&w, 0)
	return err
}
