package flanneld

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Backend types, upstream's names.
const (
	BackendHostGW = "host-gw"
	BackendVXLAN  = "vxlan"
	// BackendAlloc only allocates: the node gets its subnet, subnet.env
	// and the masquerade rules, and nothing on the node connects its
	// subnet to the others' — on a VPC the cloud route controller's route
	// per node podCIDR in the VPC router does.
	BackendAlloc = "alloc"
)

// Backends lists every backend type, in the order help texts give them.
var Backends = []string{BackendHostGW, BackendVXLAN, BackendAlloc}

// backendList is Backends for messages: "host-gw, vxlan or alloc".
func backendList() string {
	return strings.Join(Backends[:len(Backends)-1], ", ") + " or " + Backends[len(Backends)-1]
}

// Defaults of the vxlan backend, as upstream's.
const (
	DefaultVNI       = 1
	DefaultVXLANPort = 8472
	// vxlanOverhead is what VXLAN over IPv4 adds to a frame: outer IPv4
	// (20) + UDP (8) + VXLAN (8) + inner Ethernet (14).
	vxlanOverhead = 50
	// vxlan6Overhead is the same over IPv6 (outer header 40).
	vxlan6Overhead = 70
)

// Config is net-conf.json after validation: every default filled in.
type Config struct {
	EnableIPv4, EnableIPv6 bool
	// EnableNFTables selects the nftables masquerade backend when
	// --masq-backend is not given.
	EnableNFTables bool
	Network        netip.Prefix
	IPv6Network    netip.Prefix
	SubnetLen      int
	IPv6SubnetLen  int
	// SubnetMin/Max bound the subnets lease mode hands out (network
	// addresses of the first and last usable subnet).
	SubnetMin, SubnetMax         netip.Addr
	IPv6SubnetMin, IPv6SubnetMax netip.Addr
	Backend                      BackendConfig
	// Unknown lists top-level keys flannel does not define; they are
	// ignored, as upstream does, and logged.
	Unknown []string
}

// BackendConfig is the "Backend" object.
type BackendConfig struct {
	Type          string
	VNI           int
	Port          int
	DirectRouting bool
	// MTU of the vxlan device; 0 = the external interface's minus the
	// encapsulation overhead.
	MTU int
	// TxChecksumOffload is what to do with the vxlan devices' TX checksum
	// offload: TxChecksumAuto (the default), TxChecksumOn or
	// TxChecksumOff; see txcsum_linux.go. It is a nodenet extension, named
	// in upstream's style; upstream flanneld ignores unknown backend keys.
	TxChecksumOffload string
}

// Values of Backend.TxChecksumOffload (and --vxlan-tx-checksum-offload).
const (
	// TxChecksumAuto keeps offload on unless a self-test at start shows
	// this kernel's NAT corrupts VXLAN checksums with it.
	TxChecksumAuto = "auto"
	// TxChecksumOn leaves the kernel's default (on) alone, as upstream
	// flanneld does.
	TxChecksumOn = "on"
	// TxChecksumOff always turns it off: flannel's documented workaround,
	// and what nodenet did unconditionally before.
	TxChecksumOff = "off"
)

// ParseTxChecksumOffload validates a TxChecksumOffload value; "" is the
// default, auto.
func ParseTxChecksumOffload(s string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "":
		return TxChecksumAuto, nil
	case TxChecksumAuto, TxChecksumOn, TxChecksumOff:
		return v, nil
	}
	return "", fmt.Errorf("%q: want auto, on or off", s)
}

// ConfigError names the net-conf.json field that is wrong.
type ConfigError struct {
	Field, Problem string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return "net-conf.json: " + e.Problem
	}
	return "net-conf.json: " + e.Field + ": " + e.Problem
}

// IsConfigError reports whether err comes from a bad net-conf.json.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

func cfgErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// rawConfig mirrors upstream's JSON; pointers tell "absent" from zero.
type rawConfig struct {
	Network        string
	IPv6Network    string
	Networks       []string
	IPv6Networks   []string
	EnableIPv4     *bool
	EnableIPv6     bool
	EnableNFTables bool
	SubnetLen      int
	IPv6SubnetLen  int
	SubnetMin      string
	SubnetMax      string
	IPv6SubnetMin  string
	IPv6SubnetMax  string
	Backend        json.RawMessage
}

var knownKeys = []string{"Network", "IPv6Network", "Networks", "IPv6Networks", "EnableIPv4", "EnableIPv6",
	"EnableNFTables", "SubnetLen", "IPv6SubnetLen", "SubnetMin", "SubnetMax", "IPv6SubnetMin", "IPv6SubnetMax", "Backend"}

// ParseConfig parses and validates net-conf.json content. Every error is a
// *ConfigError naming the field.
func ParseConfig(data []byte) (*Config, error) {
	var raw rawConfig
	if err := decodeStrict(data, &raw); err != nil {
		return nil, err
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(data, &keys)
	c := &Config{EnableIPv4: raw.EnableIPv4 == nil || *raw.EnableIPv4, EnableIPv6: raw.EnableIPv6, EnableNFTables: raw.EnableNFTables}
	for k := range keys {
		if !slices.ContainsFunc(knownKeys, func(n string) bool { return strings.EqualFold(n, k) }) {
			c.Unknown = append(c.Unknown, k)
		}
	}
	sort.Strings(c.Unknown)
	if len(raw.Networks) > 0 || len(raw.IPv6Networks) > 0 {
		return nil, cfgErr("Networks", "several cluster networks (MultiClusterCIDR) are not supported; use Network and IPv6Network")
	}
	if !c.EnableIPv4 && !c.EnableIPv6 {
		return nil, cfgErr("EnableIPv4", "false, and EnableIPv6 is not true: no IP family is enabled")
	}
	var err error
	if c.EnableIPv4 {
		f := family{net: "Network", len: "SubnetLen", min: "SubnetMin", max: "SubnetMax", bits: 32, defLen: 24, maxLen: 30}
		if c.Network, c.SubnetLen, c.SubnetMin, c.SubnetMax, err = f.parse(raw.Network, raw.SubnetLen, raw.SubnetMin, raw.SubnetMax); err != nil {
			return nil, err
		}
	} else if raw.Network != "" {
		return nil, cfgErr("Network", "set, but EnableIPv4 is false")
	}
	if c.EnableIPv6 {
		f := family{net: "IPv6Network", len: "IPv6SubnetLen", min: "IPv6SubnetMin", max: "IPv6SubnetMax", bits: 128, defLen: 64, maxLen: 126}
		if c.IPv6Network, c.IPv6SubnetLen, c.IPv6SubnetMin, c.IPv6SubnetMax, err = f.parse(raw.IPv6Network, raw.IPv6SubnetLen, raw.IPv6SubnetMin, raw.IPv6SubnetMax); err != nil {
			return nil, err
		}
	} else if raw.IPv6Network != "" {
		return nil, cfgErr("IPv6Network", "set, but EnableIPv6 is not true")
	}
	if c.Backend, err = parseBackend(raw.Backend); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeStrict turns encoding/json's errors into ones naming the field or
// the line.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return cfgErr("", "empty; want a JSON object with at least \"Network\" and \"Backend\"")
	}
	err := json.Unmarshal(data, v)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		line, col := position(data, se.Offset)
		return cfgErr("", "invalid JSON at line %d, column %d: %v", line, col, se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return cfgErr(field, "want %s, got JSON %s", te.Type, te.Value)
	default:
		return cfgErr("", "invalid JSON: %v", err)
	}
}

func position(data []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for i := 0; i < int(offset) && i < len(data); i++ {
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// family holds the field names and limits of one IP family.
type family struct {
	net, len, min, max   string
	bits, defLen, maxLen int
}

// parse applies upstream's CheckNetworkConfig rules: SubnetLen must leave
// room for at least four subnets (the first one is never handed out), the
// default is /24 (/64) when that fits, else a quarter of the network.
func (f family) parse(network string, subnetLen int, smin, smax string) (nw netip.Prefix, sl int, lo, hi netip.Addr, err error) {
	if network == "" {
		return nw, 0, lo, hi, cfgErr(f.net, "required")
	}
	nw, perr := netip.ParsePrefix(network)
	if perr != nil {
		return nw, 0, lo, hi, cfgErr(f.net, "%q is not a CIDR", network)
	}
	if nw.Addr().BitLen() != f.bits || nw.Addr().Is4In6() {
		return nw, 0, lo, hi, cfgErr(f.net, "%s is not an IPv%d network", nw, map[int]int{32: 4, 128: 6}[f.bits])
	}
	if nw != nw.Masked() {
		return nw, 0, lo, hi, cfgErr(f.net, "%s has host bits set (did you mean %s?)", nw, nw.Masked())
	}
	switch {
	case subnetLen < 0:
		return nw, 0, lo, hi, cfgErr(f.len, "%d is negative", subnetLen)
	case subnetLen > f.maxLen:
		return nw, 0, lo, hi, cfgErr(f.len, "/%d is too long: a node subnet needs room for a gateway and pods (at most /%d)", subnetLen, f.maxLen)
	case subnetLen > 0 && subnetLen < nw.Bits()+2:
		return nw, 0, lo, hi, cfgErr(f.len, "/%d does not fit in %s %s: it must be at least /%d so the network holds four subnets", subnetLen, f.net, nw, nw.Bits()+2)
	case subnetLen == 0 && nw.Bits() > f.maxLen-2:
		return nw, 0, lo, hi, cfgErr(f.net, "%s is too small: at most /%d", nw, f.maxLen-2)
	case subnetLen == 0 && nw.Bits() <= f.defLen-2:
		subnetLen = f.defLen
	case subnetLen == 0:
		subnetLen = nw.Bits() + 2
	}
	lo, hi = subnetAt(nw, subnetLen, big.NewInt(1)).Addr(), lastSubnet(nw, subnetLen).Addr()
	if smin != "" {
		if lo, err = f.bound(f.min, smin, nw, subnetLen); err != nil {
			return
		}
	}
	if smax != "" {
		if hi, err = f.bound(f.max, smax, nw, subnetLen); err != nil {
			return
		}
	}
	if hi.Less(lo) {
		return nw, 0, lo, hi, cfgErr(f.max, "%s is below %s %s", hi, f.min, lo)
	}
	return nw, subnetLen, lo, hi, nil
}

func (f family) bound(field, s string, nw netip.Prefix, subnetLen int) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, cfgErr(field, "%q is not an IP address", s)
	}
	if !nw.Contains(a) {
		return a, cfgErr(field, "%s is not inside %s %s", a, f.net, nw)
	}
	if p := netip.PrefixFrom(a, subnetLen); p.Masked().Addr() != a {
		return a, cfgErr(field, "%s is not on a /%d boundary (%s)", a, subnetLen, f.len)
	}
	return a, nil
}

func parseBackend(raw json.RawMessage) (BackendConfig, error) {
	b := BackendConfig{Type: BackendVXLAN}
	if len(raw) == 0 || string(raw) == "null" {
		b.VNI, b.Port, b.TxChecksumOffload = DefaultVNI, DefaultVXLANPort, TxChecksumAuto
		return b, nil
	}
	// The JSON keys are the field names; rb keeps what the user wrote,
	// b gets the defaults.
	var rb BackendConfig
	if err := json.Unmarshal(raw, &rb); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return b, cfgErr("Backend."+te.Field, "want %s, got JSON %s", te.Type, te.Value)
		}
		return b, cfgErr("Backend", "want an object: %v", err)
	}
	b = rb
	switch b.Type {
	case BackendHostGW, BackendVXLAN, BackendAlloc:
	case "":
		return b, cfgErr("Backend.Type", "required (%s)", backendList())
	default:
		return b, cfgErr("Backend.Type", "%q is not supported (want %s)", b.Type, backendList())
	}
	if b.VNI == 0 {
		b.VNI = DefaultVNI
	}
	if b.VNI < 0 || b.VNI > 1<<24-1 {
		return b, cfgErr("Backend.VNI", "%d is outside 1..16777215", b.VNI)
	}
	if b.Port == 0 {
		b.Port = DefaultVXLANPort
	}
	if b.Port < 0 || b.Port > 65535 {
		return b, cfgErr("Backend.Port", "%d is outside 1..65535", b.Port)
	}
	if b.MTU != 0 && (b.MTU < 576 || b.MTU > 65535) {
		return b, cfgErr("Backend.MTU", "%d is outside 576..65535", b.MTU)
	}
	if b.Type != BackendVXLAN && (rb.VNI != 0 || rb.Port != 0 || rb.DirectRouting || rb.TxChecksumOffload != "") {
		return b, cfgErr("Backend", "VNI, Port, DirectRouting and TxChecksumOffload are vxlan settings; Type is %s", b.Type)
	}
	if b.Type == BackendVXLAN {
		v, err := ParseTxChecksumOffload(rb.TxChecksumOffload)
		if err != nil {
			return b, cfgErr("Backend.TxChecksumOffload", "%v", err)
		}
		b.TxChecksumOffload = v
	}
	return b, nil
}

// Networks returns the enabled cluster networks, IPv4 first.
func (c *Config) Networks() []netip.Prefix {
	var out []netip.Prefix
	if c.EnableIPv4 {
		out = append(out, c.Network)
	}
	if c.EnableIPv6 {
		out = append(out, c.IPv6Network)
	}
	return out
}

// subnetAt returns the n-th subnet of length l in nw (0 = the first).
func subnetAt(nw netip.Prefix, l int, n *big.Int) netip.Prefix {
	base := new(big.Int).SetBytes(nw.Addr().AsSlice())
	off := new(big.Int).Lsh(n, uint(nw.Addr().BitLen()-l))
	return netip.PrefixFrom(addrFromInt(base.Add(base, off), nw.Addr().Is4()), l)
}

func lastSubnet(nw netip.Prefix, l int) netip.Prefix {
	n := new(big.Int).Lsh(big.NewInt(1), uint(l-nw.Bits()))
	return subnetAt(nw, l, n.Sub(n, big.NewInt(1)))
}

// subnetIndex is the inverse of subnetAt.
func subnetIndex(nw netip.Prefix, l int, a netip.Addr) *big.Int {
	d := new(big.Int).Sub(new(big.Int).SetBytes(a.AsSlice()), new(big.Int).SetBytes(nw.Addr().AsSlice()))
	return d.Rsh(d, uint(nw.Addr().BitLen()-l))
}

func addrFromInt(i *big.Int, is4 bool) netip.Addr {
	n := 16
	if is4 {
		n = 4
	}
	b := i.FillBytes(make([]byte, n))
	a, _ := netip.AddrFromSlice(b)
	return a
}
