package protocol

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"unicode/utf8"
)

// Result is an ADD result. One type serves every supported spec version:
// they differ only in a few fields of the JSON, which MarshalJSON writes
// for r.CNIVersion (0.3.x and 0.4.0 tag each address with "version";
// interfaces carry "mtu", "socketPath" and "pciID" from 1.1.0 on).
type Result struct {
	CNIVersion string
	Interfaces []*Interface
	IPs        []*IPConfig
	Routes     []*Route
	DNS        DNS
}

// Interface is an entry of a result's "interfaces".
type Interface struct {
	Name       string `json:"name"`
	Mac        string `json:"mac,omitempty"`
	Mtu        int    `json:"mtu,omitempty"`
	Sandbox    string `json:"sandbox,omitempty"`
	SocketPath string `json:"socketPath,omitempty"`
	PciID      string `json:"pciID,omitempty"`
}

// IPConfig is an entry of a result's "ips". Address keeps the host part
// (10.244.1.5/24).
type IPConfig struct {
	Interface *int         `json:"interface,omitempty"`
	Address   netip.Prefix `json:"address"`
	Gateway   netip.Addr   `json:"gateway,omitzero"`
}

// Route is a route of a result or an IPAM configuration.
type Route struct {
	Dst      netip.Prefix `json:"dst"`
	GW       netip.Addr   `json:"gw,omitzero"`
	MTU      int          `json:"mtu,omitempty"`
	AdvMSS   int          `json:"advmss,omitempty"`
	Priority int          `json:"priority,omitempty"`
	Table    *int         `json:"table,omitempty"`
	Scope    *int         `json:"scope,omitempty"`
}

// DNS is the "dns" of a configuration or result.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// IsZero reports an empty DNS section, which results leave out.
func (d DNS) IsZero() bool {
	return len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0
}

// resultJSON is the decoding shape of a result of any supported version;
// "version" of 0.3.x/0.4.0 addresses is implied by the address.
type resultJSON struct {
	CNIVersion string       `json:"cniVersion"`
	Interfaces []*Interface `json:"interfaces"`
	IPs        []*IPConfig  `json:"ips"`
	Routes     []*Route     `json:"routes"`
	DNS        DNS          `json:"dns"`
}

// UnmarshalJSON reads a result of any supported version (a prevResult, a
// delegate's answer).
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result(j)
	return nil
}

// MarshalJSON writes the result in the shape of r.CNIVersion. It is
// written out by hand: reflection-based encoding costs the short-lived
// plugin process more than the rest of printing the result.
func (r *Result) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, 1024)), nil
}

func (r *Result) appendJSON(b []byte) []byte {
	pre1 := !VersionAtLeast(r.CNIVersion, "1.0.0")
	v11 := VersionAtLeast(r.CNIVersion, "1.1.0")
	b = append(b, `{"cniVersion":`...)
	b = appendString(b, r.CNIVersion)
	b = appendListField(b, "interfaces", r.Interfaces, func(b []byte, itf *Interface) []byte { return itf.appendJSON(b, v11) })
	b = appendListField(b, "ips", r.IPs, func(b []byte, ip *IPConfig) []byte { return ip.appendJSON(b, pre1) })
	b = appendListField(b, "routes", r.Routes, func(b []byte, rt *Route) []byte { return rt.appendJSON(b) })
	if !r.DNS.IsZero() {
		b = append(b, `,"dns":`...)
		b = r.DNS.appendJSON(b)
	}
	return append(b, '}')
}

func (itf *Interface) appendJSON(b []byte, v11 bool) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, itf.Name)
	b = appendStringField(b, "mac", itf.Mac)
	if v11 && itf.Mtu != 0 {
		b = appendIntField(b, "mtu", itf.Mtu)
	}
	b = appendStringField(b, "sandbox", itf.Sandbox)
	if v11 {
		b = appendStringField(b, "socketPath", itf.SocketPath)
		b = appendStringField(b, "pciID", itf.PciID)
	}
	return append(b, '}')
}

func (ip *IPConfig) appendJSON(b []byte, withVersion bool) []byte {
	b = append(b, '{')
	if withVersion {
		family := "6"
		if ip.Address.Addr().Is4() {
			family = "4"
		}
		b = append(b, `"version":"`+family+`",`...)
	}
	if ip.Interface != nil {
		b = append(b, `"interface":`...)
		b = strconv.AppendInt(b, int64(*ip.Interface), 10)
		b = append(b, ',')
	}
	b = append(b, `"address":"`...)
	b = ip.Address.AppendTo(b)
	b = append(b, '"')
	b = appendAddrField(b, "gateway", ip.Gateway)
	return append(b, '}')
}

func (rt *Route) appendJSON(b []byte) []byte {
	b = append(b, `{"dst":"`...)
	b = rt.Dst.AppendTo(b)
	b = append(b, '"')
	b = appendAddrField(b, "gw", rt.GW)
	for _, f := range []struct {
		key string
		val int
		set bool
	}{
		{"mtu", rt.MTU, rt.MTU != 0},
		{"advmss", rt.AdvMSS, rt.AdvMSS != 0},
		{"priority", rt.Priority, rt.Priority != 0},
		{"table", deref(rt.Table), rt.Table != nil},
		{"scope", deref(rt.Scope), rt.Scope != nil},
	} {
		if f.set {
			b = appendIntField(b, f.key, f.val)
		}
	}
	return append(b, '}')
}

func (d DNS) appendJSON(b []byte) []byte {
	b = append(b, '{')
	start := len(b)
	b = appendListField(b, "nameservers", d.Nameservers, appendString)
	b = appendListField(b, "search", d.Search, appendString)
	b = appendListField(b, "options", d.Options, appendString)
	b = appendStringField(b, "domain", d.Domain)
	if len(b) > start {
		b = append(b[:start], b[start+1:]...) // the first field's comma
	}
	return append(b, '}')
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// appendListField appends `,"key":[...]`, each element written by elem,
// unless the list is empty.
func appendListField[T any](b []byte, key string, list []T, elem func([]byte, T) []byte) []byte {
	if len(list) == 0 {
		return b
	}
	b = append(b, ',')
	b = appendString(b, key)
	b = append(b, ':', '[')
	for i, v := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(b, v)
	}
	return append(b, ']')
}

// appendStringField appends `,"key":"val"` unless val is empty.
func appendStringField(b []byte, key, val string) []byte {
	if val == "" {
		return b
	}
	b = append(b, ',')
	b = appendString(b, key)
	b = append(b, ':')
	return appendString(b, val)
}

// appendAddrField appends `,"key":"addr"` unless addr is the zero Addr.
func appendAddrField(b []byte, key string, addr netip.Addr) []byte {
	if !addr.IsValid() {
		return b
	}
	b = append(b, ',')
	b = appendString(b, key)
	b = append(b, ':', '"')
	b = addr.AppendTo(b)
	return append(b, '"')
}

func appendIntField(b []byte, key string, val int) []byte {
	b = append(b, ',')
	b = appendString(b, key)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(val), 10)
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// Chain appends a plugin's result to the previous plugin's (prevResult),
// shifting its interface indexes past the previous interfaces, in the
// plugin's result's version.
func Chain(prev *Result, ours *Result) *Result {
	if prev == nil {
		return ours
	}
	out := &Result{CNIVersion: ours.CNIVersion, DNS: prev.DNS}
	out.Interfaces = append(append(out.Interfaces, prev.Interfaces...), ours.Interfaces...)
	out.IPs = append(out.IPs, prev.IPs...)
	offset := len(prev.Interfaces)
	for _, ip := range ours.IPs {
		shifted := *ip
		if ip.Interface != nil {
			idx := *ip.Interface + offset
			shifted.Interface = &idx
		}
		out.IPs = append(out.IPs, &shifted)
	}
	out.Routes = append(append(out.Routes, prev.Routes...), ours.Routes...)
	if out.DNS.IsZero() {
		out.DNS = ours.DNS
	}
	return out
}
