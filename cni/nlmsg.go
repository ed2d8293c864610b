package cni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The rtnetlink messages are built and read here rather than with the
// netlink library: linking it (and package net, which it brings along)
// added about 0.1 ms to the start of every plugin process, for a dozen
// message types that take a page to write.

var native = binary.NativeEndian

// Kernel constants golang.org/x/sys/unix does not name.
const (
	rtextFilterVF = 1      // RTEXT_FILTER_VF: include VF information in links
	vethInfoPeer  = 1      // VETH_INFO_PEER
	nlaTypeMask   = 0x3fff // NLA_TYPE_MASK: the type without NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// nlSeq numbers requests, so answers can be matched to them.
var nlSeq atomic.Uint32

// request is an rtnetlink request under construction: a fixed header
// (ifinfomsg, ifaddrmsg, rtmsg) and attributes.
type request struct {
	typ, flags uint16
	seq        uint32
	data       []byte
}

// newRequest starts a request; NLM_F_REQUEST is implied.
func newRequest(typ uint16, flags int) *request {
	return &request{typ: typ, flags: uint16(unix.NLM_F_REQUEST | flags), seq: nlSeq.Add(1)}
}

// add appends raw bytes (a fixed header).
func (r *request) add(b []byte) *request {
	r.data = append(r.data, b...)
	return r
}

// attr appends an attribute, padded to the 4-byte alignment netlink wants.
func (r *request) attr(typ uint16, val []byte) *request {
	r.data = native.AppendUint16(r.data, uint16(unix.SizeofRtAttr+len(val)))
	r.data = native.AppendUint16(r.data, typ)
	r.data = append(r.data, val...)
	for len(r.data)%unix.NLA_ALIGNTO != 0 {
		r.data = append(r.data, 0)
	}
	return r
}

// nested appends an attribute whose value is what fill appends.
func (r *request) nested(typ uint16, fill func()) *request {
	start := len(r.data)
	r.attr(typ, nil)
	fill()
	native.PutUint16(r.data[start:], uint16(len(r.data)-start))
	return r
}

// serialize is the whole message, header included.
func (r *request) serialize() []byte {
	b := make([]byte, 0, unix.SizeofNlMsghdr+len(r.data))
	b = native.AppendUint32(b, uint32(unix.SizeofNlMsghdr+len(r.data)))
	b = native.AppendUint16(b, r.typ)
	b = native.AppendUint16(b, r.flags)
	b = native.AppendUint32(b, r.seq)
	b = native.AppendUint32(b, 0) // port id: the kernel's
	return append(b, r.data...)
}

// ifinfomsg is the fixed header of link messages.
func ifinfomsg(family uint8, index int, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = family
	native.PutUint32(b[4:], uint32(int32(index)))
	native.PutUint32(b[8:], flags)
	native.PutUint32(b[12:], change)
	return b
}

// ifaddrmsg is the fixed header of address messages.
func ifaddrmsg(family, prefixLen, flags uint8, index int) []byte {
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0], b[1], b[2] = family, prefixLen, flags
	native.PutUint32(b[4:], uint32(index))
	return b
}

// rtmsg is the fixed header of route messages (unicast, boot protocol).
func rtmsg(family, dstLen, table, scope uint8) []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0], b[1], b[4], b[5], b[6], b[7] = family, dstLen, table, unix.RTPROT_BOOT, scope, unix.RTN_UNICAST
	return b
}

func u32(v uint32) []byte { return native.AppendUint32(nil, v) }

// cstr is a NUL-terminated string attribute value.
func cstr(s string) []byte { return append([]byte(s), 0) }

// nlAttr is a received attribute; typ has the nested and byte-order flags
// masked off.
type nlAttr struct {
	typ uint16
	val []byte
}

// parseAttrs splits a run of attributes.
func parseAttrs(b []byte) ([]nlAttr, error) {
	var out []nlAttr
	for len(b) >= unix.SizeofRtAttr {
		l := int(native.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil, fmt.Errorf("malformed netlink attribute (length %d of %d)", l, len(b))
		}
		out = append(out, nlAttr{typ: native.Uint16(b[2:]) & nlaTypeMask, val: b[unix.SizeofRtAttr:l]})
		l = (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return out, nil
}

func attrUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return native.Uint32(b)
}

// cString is a string attribute without its NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// errDumpInterrupted: the kernel's dump ran into concurrent changes and
// may be inconsistent; it is worth retrying.
var errDumpInterrupted = errors.New("netlink dump interrupted")

// dumpOnce sends a dump request and returns the bodies of its answers of
// type want.
func (c *rtnlConn) dumpOnce(req *request, want uint16) ([][]byte, error) {
	req.flags |= unix.NLM_F_DUMP
	if err := unix.Sendto(c.fd, req.serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send netlink dump: %w", err)
	}
	var out [][]byte
	interrupted := false
	for {
		msgs, err := c.receive()
		if err != nil {
			return nil, fmt.Errorf("receive netlink dump: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != req.seq {
				continue
			}
			interrupted = interrupted || m.Header.Flags&unix.NLM_F_DUMP_INTR != 0
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				if len(m.Data) >= 4 && native.Uint32(m.Data) != 0 {
					return nil, unix.Errno(-int32(native.Uint32(m.Data)))
				}
				if interrupted {
					return nil, errDumpInterrupted
				}
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := -int32(native.Uint32(m.Data)); errno != 0 {
						return nil, unix.Errno(errno)
					}
				}
			case want:
				out = append(out, append([]byte(nil), m.Data...))
			}
		}
	}
}

// dump runs a dump, again while concurrent changes interrupt it.
func (c *rtnlConn) dump(what string, newReq func() *request, want uint16) ([][]byte, error) {
	var err error
	for range 10 {
		var out [][]byte
		if out, err = c.dumpOnce(newReq(), want); !errors.Is(err, errDumpInterrupted) {
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", what, err)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("list %s: %w", what, err)
}
