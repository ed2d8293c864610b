package nlmsg

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// attrTypeMask is NLA_TYPE_MASK: an attribute's type without the
// NLA_F_NESTED and NLA_F_NET_BYTEORDER flags.
const attrTypeMask = 0x3fff

// Attr is a received attribute. Value aliases the buffer it was parsed
// from.
type Attr struct {
	// Type has the NLA_F_NESTED and NLA_F_NET_BYTEORDER flags masked off.
	Type  uint16
	Value []byte
}

// ParseAttrs splits a run of attributes (a message body after its fixed
// header, or a nested attribute's value). Trailing bytes too short for an
// attribute header are ignored, as the kernel does.
func ParseAttrs(b []byte) ([]Attr, error) {
	var out []Attr
	for len(b) >= AttrHeaderLen {
		l := int(native.Uint16(b))
		if l < AttrHeaderLen || l > len(b) {
			return nil, fmt.Errorf("malformed netlink attribute (length %d of %d)", l, len(b))
		}
		out = append(out, Attr{Type: native.Uint16(b[2:]) & attrTypeMask, Value: b[AttrHeaderLen:l]})
		if align(l) >= len(b) {
			break
		}
		b = b[align(l):]
	}
	return out, nil
}

// Uint32 reads a host-byte-order 32-bit attribute value (0 if it is too
// short).
func Uint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return native.Uint32(b)
}

// String reads a string attribute value, without its NUL.
func String(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// errno reads the error code an NLMSG_ERROR or NLMSG_DONE body starts
// with (the kernel sends it negated).
func errno(body []byte) unix.Errno {
	return unix.Errno(-int32(Uint32(body)))
}
