package subnetenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/nodenet/nodenet/internal/atomicfile"
)

// DefaultPath is where flanneld writes the file.
const DefaultPath = "/run/flannel/subnet.env"

// Keys, in the order upstream flannel writes them.
const (
	KeyNetwork     = "FLANNEL_NETWORK"
	KeySubnet      = "FLANNEL_SUBNET"
	KeyIPv6Network = "FLANNEL_IPV6_NETWORK"
	KeyIPv6Subnet  = "FLANNEL_IPV6_SUBNET"
	KeyMTU         = "FLANNEL_MTU"
	KeyIPMasq      = "FLANNEL_IPMASQ"
)

// Env is the content of subnet.env. Subnet and IPv6Subnet carry the node's
// first usable address with the subnet's prefix length (10.244.1.1/24), as
// flannel writes them; the zero Prefix means "family not enabled".
type Env struct {
	Network     netip.Prefix
	Subnet      netip.Prefix
	IPv6Network netip.Prefix
	IPv6Subnet  netip.Prefix
	MTU         int
	IPMasq      bool
}

// FromSubnets builds an Env from node subnets given as network addresses
// (10.244.1.0/24): the file holds the first usable address instead.
func FromSubnets(network, subnet, network6, subnet6 netip.Prefix, mtu int, ipMasq bool) Env {
	e := Env{Network: network, IPv6Network: network6, MTU: mtu, IPMasq: ipMasq}
	if subnet.IsValid() {
		e.Subnet = netip.PrefixFrom(subnet.Masked().Addr().Next(), subnet.Bits())
	}
	if subnet6.IsValid() {
		e.IPv6Subnet = netip.PrefixFrom(subnet6.Masked().Addr().Next(), subnet6.Bits())
	}
	return e
}

// Marshal renders the file exactly as upstream flannel does.
func (e Env) Marshal() []byte {
	var b bytes.Buffer
	if e.Network.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n", KeyNetwork, e.Network)
		fmt.Fprintf(&b, "%s=%s\n", KeySubnet, e.Subnet)
	}
	if e.IPv6Network.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n", KeyIPv6Network, e.IPv6Network)
		fmt.Fprintf(&b, "%s=%s\n", KeyIPv6Subnet, e.IPv6Subnet)
	}
	fmt.Fprintf(&b, "%s=%d\n", KeyMTU, e.MTU)
	fmt.Fprintf(&b, "%s=%v\n", KeyIPMasq, e.IPMasq)
	return b.Bytes()
}

// Write stores e at path atomically (temp file in the same directory,
// fsync, rename): a reader never sees a half-written file.
func Write(path string, e Env) error {
	if err := e.Validate(); err != nil {
		return err
	}
	return atomicfile.Write(path, e.Marshal(), 0o644)
}

// ErrNotExist wraps a missing file, so the CNI plugin can answer "try again
// later" while flanneld is still starting.
var ErrNotExist = errors.New("subnet.env does not exist")

// KeyError names the key of a malformed or missing entry.
type KeyError struct {
	Path, Key, Problem string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Path, e.Key, e.Problem)
}

// Read parses the file at path.
func Read(path string) (Env, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Env{}, fmt.Errorf("%w: %s (is flanneld running?)", ErrNotExist, path)
	}
	if err != nil {
		return Env{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse reads subnet.env content; name is used in errors. Unknown keys are
// ignored (other tools add their own), comments and blank lines too.
func Parse(name string, r io.Reader) (Env, error) {
	var e Env
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, val, ok := strings.Cut(text, "=")
		if !ok {
			return Env{}, &KeyError{Path: name, Key: fmt.Sprintf("line %d", line), Problem: fmt.Sprintf("want KEY=VALUE, got %q", text)}
		}
		key, val = strings.TrimSpace(key), strings.Trim(strings.TrimSpace(val), `"`)
		if err := e.set(name, key, val); err != nil {
			return Env{}, err
		}
		seen[key] = true
	}
	if err := sc.Err(); err != nil {
		return Env{}, fmt.Errorf("read %s: %w", name, err)
	}
	for _, k := range []string{KeyMTU, KeyIPMasq} {
		if !seen[k] {
			return Env{}, &KeyError{Path: name, Key: k, Problem: "missing"}
		}
	}
	if err := e.Validate(); err != nil {
		var ke *KeyError
		if errors.As(err, &ke) {
			ke.Path = name
		}
		return Env{}, err
	}
	return e, nil
}

func (e *Env) set(name, key, val string) error {
	bad := func(problem string) error { return &KeyError{Path: name, Key: key, Problem: problem} }
	prefix := func(dst *netip.Prefix) error {
		p, err := netip.ParsePrefix(val)
		if err != nil {
			return bad(fmt.Sprintf("%q is not a CIDR", val))
		}
		*dst = p
		return nil
	}
	switch key {
	case KeyNetwork:
		return prefix(&e.Network)
	case KeySubnet:
		return prefix(&e.Subnet)
	case KeyIPv6Network:
		return prefix(&e.IPv6Network)
	case KeyIPv6Subnet:
		return prefix(&e.IPv6Subnet)
	case KeyMTU:
		mtu, err := strconv.Atoi(val)
		if err != nil {
			return bad(fmt.Sprintf("%q is not a number", val))
		}
		e.MTU = mtu
	case KeyIPMasq:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return bad(fmt.Sprintf("%q is not true or false", val))
		}
		e.IPMasq = b
	}
	return nil
}

// Validate checks that the entries fit together: each family has both its
// network and subnet, the subnet lies in the network, and the MTU is sane.
func (e Env) Validate() error {
	check := func(netKey, subKey string, nw, sn netip.Prefix, is4 bool) error {
		switch {
		case !nw.IsValid() && !sn.IsValid():
			return nil
		case !nw.IsValid():
			return &KeyError{Key: netKey, Problem: "missing (" + subKey + " is set)"}
		case !sn.IsValid():
			return &KeyError{Key: subKey, Problem: "missing (" + netKey + " is set)"}
		case nw.Addr().Is4() != is4:
			return &KeyError{Key: netKey, Problem: fmt.Sprintf("%s is of the wrong IP family", nw)}
		case sn.Addr().Is4() != is4:
			return &KeyError{Key: subKey, Problem: fmt.Sprintf("%s is of the wrong IP family", sn)}
		case sn.Bits() < nw.Bits() || !nw.Contains(sn.Addr()):
			return &KeyError{Key: subKey, Problem: fmt.Sprintf("%s is not inside %s %s", sn, netKey, nw)}
		case sn.Addr() == sn.Masked().Addr():
			return &KeyError{Key: subKey, Problem: fmt.Sprintf("%s must be the first usable address of the subnet (flannel writes %s)", sn, netip.PrefixFrom(sn.Addr().Next(), sn.Bits()))}
		}
		return nil
	}
	if err := check(KeyNetwork, KeySubnet, e.Network, e.Subnet, true); err != nil {
		return err
	}
	if err := check(KeyIPv6Network, KeyIPv6Subnet, e.IPv6Network, e.IPv6Subnet, false); err != nil {
		return err
	}
	if !e.Network.IsValid() && !e.IPv6Network.IsValid() {
		return &KeyError{Key: KeyNetwork, Problem: "missing (neither " + KeyNetwork + " nor " + KeyIPv6Network + " is set)"}
	}
	if e.MTU < 576 || e.MTU > 65535 {
		return &KeyError{Key: KeyMTU, Problem: fmt.Sprintf("%d is outside 576..65535", e.MTU)}
	}
	return nil
}

// Gateway returns the node subnet's first usable address (the cni0 bridge
// address) and the subnet itself, for the given family.
func (e Env) Gateway(ipv6 bool) (gw netip.Addr, subnet netip.Prefix, ok bool) {
	sn := e.Subnet
	if ipv6 {
		sn = e.IPv6Subnet
	}
	if !sn.IsValid() {
		return netip.Addr{}, netip.Prefix{}, false
	}
	return sn.Addr(), sn.Masked(), true
}
