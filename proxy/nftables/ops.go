package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Field is one component of a set key or map value, as the kernel stores
// it: every field of a concatenation takes a multiple of 4 bytes.
type Field uint8

const (
	FieldU32  Field = iota + 1 // integer in host byte order (numgen results)
	FieldIPv4                  // ipv4_addr
	FieldIPv6                  // ipv6_addr
	FieldPort                  // inet_service (network byte order, padded to 4)
)

// Layout says how a set's keys and (for data maps) values are encoded. Only
// sets and maps whose values are data, not verdicts, have one: their
// elements can change without the kernel re-validating the table's chains.
type Layout struct {
	Key, Value []Field
}

// OpKind is what an Op does.
type OpKind uint8

const (
	OpAddElement OpKind = iota
	OpDeleteElement
	OpFlushChain // delete every rule of Chain
	OpAddRule    // append Rule to Chain
)

// Op is one step of a transaction the Runner may send without the nft
// CLI: element changes of data sets, and rewriting the rules of existing
// chains. Keys, values and rules are written in nft syntax ("10.0.0.1 .
// 80").
type Op struct {
	Kind   OpKind
	Set    string
	Layout Layout
	Key    string
	Value  string // "" for plain sets
	Chain  string
	Rule   string
}

// script renders op as one nft command on table ("ip nodenet-proxy").
func (op Op) script(table string) string {
	switch op.Kind {
	case OpDeleteElement:
		return "delete element " + table + " " + op.Set + " { " + op.Key + " }"
	case OpFlushChain:
		return "flush chain " + table + " " + op.Chain
	case OpAddRule:
		return "add rule " + table + " " + op.Chain + " " + op.Rule
	}
	item := op.Key
	if op.Value != "" {
		item += " : " + op.Value
	}
	return "add element " + table + " " + op.Set + " { " + item + " }"
}

// encodeFields packs "a . b . c" by fields the way the kernel expects
// concatenations in its registers.
func encodeFields(s string, fields []Field) ([]byte, error) {
	parts := strings.Split(s, " . ")
	if len(parts) != len(fields) {
		return nil, fmt.Errorf("%q: want %d fields, have %d", s, len(fields), len(parts))
	}
	var out []byte
	for i, f := range fields {
		p := strings.TrimSpace(parts[i])
		switch f {
		case FieldU32:
			n, err := strconv.ParseUint(p, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%q: field %d is not a 32-bit integer", s, i)
			}
			out = binary.NativeEndian.AppendUint32(out, uint32(n))
		case FieldIPv4, FieldIPv6:
			a, err := netip.ParseAddr(p)
			if err != nil || a.Is4() != (f == FieldIPv4) || a.Zone() != "" {
				return nil, fmt.Errorf("%q: field %d is not an %s address", s, i, map[bool]string{true: "IPv4", false: "IPv6"}[f == FieldIPv4])
			}
			out = append(out, a.AsSlice()...)
		case FieldPort:
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("%q: field %d is not a port", s, i)
			}
			out = binary.BigEndian.AppendUint16(out, uint16(n))
			out = append(out, 0, 0)
		default:
			return nil, fmt.Errorf("%q: unknown field type %d", s, f)
		}
	}
	return out, nil
}
