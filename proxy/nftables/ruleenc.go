package nftables

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

// The rules a change in a service's endpoint count rewrites (the service
// and local chains: the masquerade mark and the DNAT through an endpoints
// map) are compiled here to nf_tables expressions, so such a change can go
// over netlink like element changes do. Anything else this package writes
// is not encodable and goes through nft. The compiler emits exactly the
// expressions nft emits for the same text (checked with `nft
// --debug=netlink`), so `nft list` prints the rule back unchanged; the
// kernel contract test holds it to that.

// errNotEncodable sends a transaction to the CLI.
var errNotEncodable = errors.New("rule not encodable over netlink")

// nf_tables expression attributes (linux/netfilter/nf_tables.h).
const (
	nftaRuleTable       = 1
	nftaRuleChain       = 2
	nftaRuleExpressions = 4
	nftaExprName        = 1
	nftaExprData        = 2

	nftReg1     = 1 // 16-byte register 1
	nftReg2     = 2
	nftReg32_01 = 9 // second 32-bit word of register 1

	nftMetaMark    = 3
	nftMetaL4Proto = 16

	nftPayloadNetwork   = 1
	nftPayloadTransport = 2

	nftCmpEq  = 0
	nftCmpNeq = 1

	nftNgRandom = 1
	nftNatDNAT  = 1
)

// ruleEncoder accumulates the expressions of one rule.
type ruleEncoder struct {
	n      *nlmsg.Writer
	family string // "ip" or "ip6"
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func (e *ruleEncoder) expr(name string, attrs func()) {
	el := nest(e.n, nftaListElem)
	e.n.String(nftaExprName, name)
	d := nest(e.n, nftaExprData)
	attrs()
	e.n.EndNest(d)
	e.n.EndNest(el)
}

func (e *ruleEncoder) data(typ uint16, v []byte) {
	d := nest(e.n, typ)
	e.n.Attr(nftaDataValue, v)
	e.n.EndNest(d)
}

func (e *ruleEncoder) payload(base, offset, length uint32) {
	e.expr("payload", func() {
		e.n.Attr(1, be32(nftReg1)) // NFTA_PAYLOAD_DREG
		e.n.Attr(2, be32(base))    // NFTA_PAYLOAD_BASE
		e.n.Attr(3, be32(offset))  // NFTA_PAYLOAD_OFFSET
		e.n.Attr(4, be32(length))  // NFTA_PAYLOAD_LEN
	})
}

func (e *ruleEncoder) cmp(op uint32, v []byte) {
	e.expr("cmp", func() {
		e.n.Attr(1, be32(nftReg1)) // NFTA_CMP_SREG
		e.n.Attr(2, be32(op))      // NFTA_CMP_OP
		e.data(3, v)               // NFTA_CMP_DATA
	})
}

func (e *ruleEncoder) bitwise(mask, xor []byte) {
	e.expr("bitwise", func() {
		e.n.Attr(1, be32(nftReg1))           // NFTA_BITWISE_SREG
		e.n.Attr(2, be32(nftReg1))           // NFTA_BITWISE_DREG
		e.n.Attr(3, be32(uint32(len(mask)))) // NFTA_BITWISE_LEN
		e.data(4, mask)                      // NFTA_BITWISE_MASK
		e.data(5, xor)                       // NFTA_BITWISE_XOR
	})
}

func (e *ruleEncoder) metaLoad(key uint32) {
	e.expr("meta", func() {
		e.n.Attr(2, be32(key))     // NFTA_META_KEY
		e.n.Attr(1, be32(nftReg1)) // NFTA_META_DREG
	})
}

func protoNumber(p string) (byte, bool) {
	switch p {
	case "tcp":
		return unix.IPPROTO_TCP, true
	case "udp":
		return unix.IPPROTO_UDP, true
	case "sctp":
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

// l4proto matches the transport protocol (a 4-byte register compare, as
// nft pads it).
func (e *ruleEncoder) l4proto(p string) error {
	n, ok := protoNumber(p)
	if !ok {
		return errNotEncodable
	}
	e.metaLoad(nftMetaL4Proto)
	e.cmp(nftCmpEq, []byte{n})
	return nil
}

// addrMatch compiles "ip saddr [!=] ADDR|PREFIX".
func (e *ruleEncoder) addrMatch(field string, neg bool, value string) error {
	var offset, size uint32
	switch {
	case e.family == "ip" && field == "saddr":
		offset, size = 12, 4
	case e.family == "ip" && field == "daddr":
		offset, size = 16, 4
	case e.family == "ip6" && field == "saddr":
		offset, size = 8, 16
	case e.family == "ip6" && field == "daddr":
		offset, size = 24, 16
	default:
		return errNotEncodable
	}
	var pfx netip.Prefix
	if strings.Contains(value, "/") {
		p, err := netip.ParsePrefix(value)
		if err != nil {
			return errNotEncodable
		}
		pfx = p.Masked()
	} else {
		a, err := netip.ParseAddr(value)
		if err != nil {
			return errNotEncodable
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if uint32(pfx.Addr().BitLen()/8) != size {
		return errNotEncodable
	}
	op := uint32(nftCmpEq)
	if neg {
		op = nftCmpNeq
	}
	addr := pfx.Addr().AsSlice()
	bits := pfx.Bits()
	if bits%8 == 0 {
		// A byte-aligned prefix compares only its bytes.
		e.payload(nftPayloadNetwork, offset, uint32(bits/8))
		e.cmp(op, addr[:bits/8])
		return nil
	}
	mask := make([]byte, size)
	for i := range bits {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	e.payload(nftPayloadNetwork, offset, size)
	e.bitwise(mask, make([]byte, size))
	e.cmp(op, addr)
	return nil
}

// encodeRule compiles rule (canonical nft text) for family into the
// NFTA_RULE_EXPRESSIONS list of n.
func encodeRule(n *nlmsg.Writer, family, rule string) error {
	e := &ruleEncoder{n: n, family: family}
	w := strings.Fields(rule)
	list := nest(n, nftaRuleExpressions)
	for i := 0; i < len(w); {
		switch {
		case w[i] == family && i+2 < len(w) && (w[i+1] == "saddr" || w[i+1] == "daddr"):
			neg := w[i+2] == "!="
			j := i + 2
			if neg {
				j++
			}
			if j >= len(w) {
				return errNotEncodable
			}
			if err := e.addrMatch(w[i+1], neg, w[j]); err != nil {
				return err
			}
			i = j + 1
		case i+2 < len(w) && w[i+1] == "dport":
			port, err := strconv.ParseUint(w[i+2], 10, 16)
			if err != nil {
				return errNotEncodable
			}
			if err := e.l4proto(w[i]); err != nil {
				return err
			}
			e.payload(nftPayloadTransport, 2, 2)
			e.cmp(nftCmpEq, binary.BigEndian.AppendUint16(nil, uint16(port)))
			i += 3
		case w[i] == "meta" && i+2 < len(w) && w[i+1] == "l4proto":
			if err := e.l4proto(w[i+2]); err != nil {
				return err
			}
			i += 3
		case w[i] == "meta" && i+6 < len(w) && strings.Join(w[i:i+6], " ") == "meta mark set meta mark |":
			v, err := strconv.ParseUint(w[i+6], 0, 32)
			if err != nil {
				return errNotEncodable
			}
			e.metaLoad(nftMetaMark)
			e.bitwise(binary.NativeEndian.AppendUint32(nil, ^uint32(v)), binary.NativeEndian.AppendUint32(nil, uint32(v)))
			e.expr("meta", func() {
				e.n.Attr(2, be32(nftMetaMark)) // NFTA_META_KEY
				e.n.Attr(3, be32(nftReg1))     // NFTA_META_SREG
			})
			i += 7
		case w[i] == "dnat":
			if err := e.dnatMap(w[i:]); err != nil {
				return err
			}
			i = len(w)
		default:
			return errNotEncodable
		}
	}
	n.EndNest(list)
	return nil
}

// dnatMap compiles "dnat ip to numgen random mod K [offset B] map @S".
func (e *ruleEncoder) dnatMap(w []string) error {
	if len(w) < 8 || w[1] != e.family || w[2] != "to" || w[3] != "numgen" || w[4] != "random" || w[5] != "mod" {
		return errNotEncodable
	}
	mod, err := strconv.ParseUint(w[6], 10, 32)
	if err != nil || mod == 0 {
		return errNotEncodable
	}
	var offset uint64
	rest := w[7:]
	if rest[0] == "offset" && len(rest) > 1 {
		if offset, err = strconv.ParseUint(rest[1], 10, 32); err != nil {
			return errNotEncodable
		}
		rest = rest[2:]
	}
	if len(rest) != 2 || rest[0] != "map" || !strings.HasPrefix(rest[1], "@") {
		return errNotEncodable
	}
	set := rest[1][1:]
	e.expr("numgen", func() {
		e.n.Attr(1, be32(nftReg1))        // NFTA_NG_DREG
		e.n.Attr(2, be32(uint32(mod)))    // NFTA_NG_MODULUS
		e.n.Attr(3, be32(nftNgRandom))    // NFTA_NG_TYPE
		e.n.Attr(4, be32(uint32(offset))) // NFTA_NG_OFFSET
	})
	e.expr("lookup", func() {
		e.n.String(1, set)         // NFTA_LOOKUP_SET
		e.n.Attr(2, be32(nftReg1)) // NFTA_LOOKUP_SREG
		e.n.Attr(3, be32(nftReg1)) // NFTA_LOOKUP_DREG
	})
	fam, protoReg := uint32(unix.NFPROTO_IPV4), uint32(nftReg32_01)
	if e.family == "ip6" {
		fam, protoReg = unix.NFPROTO_IPV6, nftReg2 // the port follows 16 address bytes
	}
	e.expr("nat", func() {
		e.n.Attr(1, be32(nftNatDNAT)) // NFTA_NAT_TYPE
		e.n.Attr(2, be32(fam))        // NFTA_NAT_FAMILY
		e.n.Attr(3, be32(nftReg1))    // NFTA_NAT_REG_ADDR_MIN
		e.n.Attr(5, be32(protoReg))   // NFTA_NAT_REG_PROTO_MIN
	})
	return nil
}
