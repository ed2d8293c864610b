package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/subnetenv"
)

// Plugin types the binary answers to.
const (
	TypeNodenet = "nodenet"
	TypeFlannel = "flannel"
)

// Defaults shared with flannel and the reference plugins.
const (
	DefaultBridge       = "cni0"
	DefaultSubnetFile   = subnetenv.DefaultPath
	DefaultFlannelDir   = "/var/lib/cni/flannel"
	DefaultBridgeMTU    = 1500
	defaultDelegateType = "bridge"
	defaultDelegateIPAM = "host-local"
)

// NetConf is the configuration on stdin: the keys every configuration has
// and those of both plugin types. "type": "nodenet" uses the bridge/IPAM
// fields directly, "type": "flannel" uses subnetFile, dataDir (the
// delegate cache), delegate and ipam, the keys upstream flannel's CNI
// plugin reads.
type NetConf struct {
	protocol.NetConf

	SubnetFile       string               `json:"subnetFile,omitempty"`
	DataDir          string               `json:"dataDir,omitempty"`
	Bridge           string               `json:"bridge,omitempty"`
	MTU              int                  `json:"mtu,omitempty"`
	HairpinMode      *bool                `json:"hairpinMode,omitempty"`
	IsDefaultGateway *bool                `json:"isDefaultGateway,omitempty"`
	IPMasq           bool                 `json:"ipMasq,omitempty"`
	ForceAddress     bool                 `json:"forceAddress,omitempty"`
	Ranges           []hostlocal.RangeSet `json:"ranges,omitempty"`
	LogFile          string               `json:"logFile,omitempty"`

	Delegate map[string]any `json:"delegate,omitempty"`
	IPAM     map[string]any `json:"ipam,omitempty"`

	Args *struct {
		CNI struct {
			IPs []string `json:"ips,omitempty"`
		} `json:"cni"`
	} `json:"args,omitempty"`
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`

	// PrevResult is RawPrevResult parsed.
	PrevResult *protocol.Result `json:"-"`
}

// confFields are NetConf's keys for protocol.Decode's fast path: every
// JSON key of NetConf, the embedded common ones included.
var confFields = []protocol.Field[NetConf]{
	protocol.StringField("cniVersion", func(c *NetConf) *string { return &c.CNIVersion }),
	protocol.StringField("name", func(c *NetConf) *string { return &c.Name }),
	protocol.StringField("type", func(c *NetConf) *string { return &c.Type }),
	protocol.StringField("subnetFile", func(c *NetConf) *string { return &c.SubnetFile }),
	protocol.StringField("dataDir", func(c *NetConf) *string { return &c.DataDir }),
	protocol.StringField("bridge", func(c *NetConf) *string { return &c.Bridge }),
	protocol.StringField("logFile", func(c *NetConf) *string { return &c.LogFile }),
	protocol.IntField("mtu", func(c *NetConf) *int { return &c.MTU }),
	protocol.BoolField("ipMasq", func(c *NetConf) *bool { return &c.IPMasq }),
	protocol.BoolField("forceAddress", func(c *NetConf) *bool { return &c.ForceAddress }),
	protocol.OptionalBoolField("hairpinMode", func(c *NetConf) **bool { return &c.HairpinMode }),
	protocol.OptionalBoolField("isDefaultGateway", func(c *NetConf) **bool { return &c.IsDefaultGateway }),
	protocol.NestedField("dns", func(c *NetConf) any { return &c.DNS }),
	protocol.NestedField("prevResult", func(c *NetConf) any { return &c.RawPrevResult }),
	protocol.NestedField(protocol.ValidAttachmentsKey, func(c *NetConf) any { return &c.ValidAttachments }),
	protocol.NestedField(protocol.LegacyAttachmentsKey, func(c *NetConf) any { return &c.LegacyAttachments }),
	protocol.NestedField("ranges", func(c *NetConf) any { return &c.Ranges }),
	protocol.NestedField("delegate", func(c *NetConf) any { return &c.Delegate }),
	protocol.NestedField("ipam", func(c *NetConf) any { return &c.IPAM }),
	protocol.NestedField("args", func(c *NetConf) any { return &c.Args }),
	protocol.NestedField("runtimeConfig", func(c *NetConf) any { return &c.RuntimeConfig }),
}

// decodeConf decodes a network configuration into c, exactly as
// json.Unmarshal does.
func decodeConf(data []byte, c *NetConf) error { return protocol.Decode(data, c, confFields) }

// DecodeConf implements protocol.Plugin.
func (p *Plugin) DecodeConf(stdin []byte) (*protocol.NetConf, error) {
	var c NetConf
	if err := decodeConf(stdin, &c); err != nil {
		return nil, err
	}
	return &c.NetConf, nil
}

// ParseConfig decodes and validates stdin. Decoding problems are code 6,
// invalid values code 7.
func ParseConfig(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := decodeConf(stdin, &c); err != nil {
		return nil, protocol.Errorf(protocol.CodeDecode, "decode network configuration: %w", err)
	}
	if c.CNIVersion == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: cniVersion is missing")
	}
	if !protocol.Supported(c.CNIVersion) {
		return nil, protocol.Errorf(protocol.CodeIncompatibleVersion, "network configuration: cniVersion %q is not one of %v", c.CNIVersion, protocol.SupportedVersions)
	}
	if c.Name == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: name is missing")
	}
	if !protocol.ValidName(c.Name) {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: name %q: invalid characters found in network name", c.Name)
	}
	switch c.Type {
	case TypeNodenet:
		if err := c.validateNodenet(); err != nil {
			return nil, err
		}
	case TypeFlannel:
		if err := c.validateFlannel(); err != nil {
			return nil, err
		}
	default:
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: type %q is neither %q nor %q", c.Type, TypeNodenet, TypeFlannel)
	}
	if len(c.RawPrevResult) > 0 && string(c.RawPrevResult) != "null" {
		c.PrevResult = new(protocol.Result)
		if err := json.Unmarshal(c.RawPrevResult, c.PrevResult); err != nil {
			return nil, protocol.Errorf(protocol.CodeDecode, "network configuration: prevResult: %w", err)
		}
	}
	if len(c.ValidAttachments) == 0 {
		c.ValidAttachments = c.LegacyAttachments
	}
	return &c, nil
}

func (c *NetConf) validateNodenet() error {
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if err := protocol.ValidateIfName(c.Bridge); err != nil {
		return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: bridge %q: %w", c.Bridge, err)
	}
	if c.SubnetFile == "" {
		c.SubnetFile = DefaultSubnetFile
	}
	if c.DataDir == "" {
		c.DataDir = hostlocal.DefaultDataDir
	}
	if c.MTU < 0 || c.MTU > 65535 || (c.MTU > 0 && c.MTU < 68) {
		return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: mtu %d is outside 68..65535", c.MTU)
	}
	for i, set := range c.Ranges {
		canon, err := set.Canonical()
		if err != nil {
			return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: ranges[%d]: %w", i, err)
		}
		c.Ranges[i] = canon
	}
	if c.Delegate != nil {
		return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: delegate is a %q key; type %q does the bridge itself", TypeFlannel, TypeNodenet)
	}
	if c.IPAM != nil {
		// Accepting it would silently allocate from subnet.env instead.
		return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: type %q allocates addresses itself; use ranges instead of ipam", TypeNodenet)
	}
	return nil
}

func (c *NetConf) validateFlannel() error {
	if c.SubnetFile == "" {
		c.SubnetFile = DefaultSubnetFile
	}
	if c.DataDir == "" {
		c.DataDir = DefaultFlannelDir
	}
	if t, ok := c.Delegate["type"]; ok {
		if _, isString := t.(string); !isString {
			return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: delegate.type must be a string")
		}
	}
	for _, k := range []string{"name", "ipam"} {
		if _, ok := c.Delegate[k]; ok {
			return protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: delegate must not have %q, flannel sets it", k)
		}
	}
	return nil
}

// hairpin and defaultRoute default to true: pods reach themselves through
// Services, and need a default route.
func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// network is a configuration resolved for one command: the same model for
// both config types, and for a flannel delegate read back from its cache.
type network struct {
	name         string
	cniVersion   string
	bridge       string
	mtu          int
	hairpin      bool
	isGateway    bool
	defaultRoute bool
	ipMasq       bool
	forceAddress bool
	promisc      bool
	dataDir      string
	rangeSets    []hostlocal.RangeSet
	routes       []*protocol.Route
	dns          protocol.DNS
}

// readSubnetEnv maps subnet.env problems to "try again later": flanneld
// may simply not have written the file yet.
func readSubnetEnv(path string) (subnetenv.Env, error) {
	env, err := readSubnetFile(path)
	if err == nil {
		return env, nil
	}
	var ke *subnetenv.KeyError
	if errors.As(err, &ke) {
		return env, protocol.Errorf(protocol.CodeTryAgainLater, "subnet file %s is malformed: key %s: %s", ke.Path, ke.Key, ke.Problem)
	}
	return env, protocol.Errorf(protocol.CodeTryAgainLater, "read subnet file: %w", err)
}

// nodenetNetwork resolves a "nodenet" config against subnet.env.
func nodenetNetwork(c *NetConf, env subnetenv.Env) (*network, error) {
	n := &network{
		name: c.Name, cniVersion: c.CNIVersion, bridge: c.Bridge, mtu: c.MTU,
		hairpin: boolOr(c.HairpinMode, true), isGateway: true, defaultRoute: boolOr(c.IsDefaultGateway, true),
		ipMasq: c.IPMasq, forceAddress: c.ForceAddress, dataDir: c.DataDir, dns: c.DNS,
	}
	if n.mtu == 0 {
		n.mtu = env.MTU
	}
	n.rangeSets = c.Ranges
	for _, v6 := range []bool{false, true} {
		_, subnet, ok := env.Gateway(v6)
		if !ok {
			continue
		}
		if len(c.Ranges) == 0 {
			set, err := hostlocal.RangeSet{{Subnet: subnet}}.Canonical()
			if err != nil {
				return nil, protocol.Errorf(protocol.CodeTryAgainLater, "subnet file %s: %w", c.SubnetFile, err)
			}
			n.rangeSets = append(n.rangeSets, set)
		}
		nw := env.Network
		if v6 {
			nw = env.IPv6Network
		}
		n.routes = append(n.routes, &protocol.Route{Dst: nw})
	}
	return n, nil
}

// teardownNetwork is what DEL and GC need of a config: no subnet.env, so
// a node whose flanneld is gone can still clean up. For a "flannel" config
// it is the delegate's defaults (DEL prefers the delegate cache).
func teardownNetwork(c *NetConf) *network {
	if c.Type == TypeFlannel {
		return flannelTeardownNetwork(c)
	}
	return &network{name: c.Name, cniVersion: c.CNIVersion, bridge: c.Bridge, dataDir: c.DataDir}
}

// requestedIPs collects the addresses asked for through CNI_ARGS
// (IP=a[,b]), args.cni.ips and runtimeConfig.ips, as host-local does.
// Entries may carry a prefix length, which is ignored.
func requestedIPs(c *NetConf, cniArgs string) ([]netip.Addr, error) {
	var out []netip.Addr
	add := func(code uint, src, s string) error {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil
		}
		if i := strings.IndexByte(s, '/'); i >= 0 {
			s = s[:i]
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return protocol.Errorf(code, "%s: %q is not an IP address", src, s)
		}
		if !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
		return nil
	}
	if cniArgs != "" {
		for _, kv := range strings.Split(cniArgs, ";") {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, protocol.Errorf(protocol.CodeBadEnv, "CNI_ARGS: %q is not KEY=VALUE", kv)
			}
			if k != "IP" {
				continue
			}
			for _, ip := range strings.Split(v, ",") {
				if err := add(protocol.CodeBadEnv, "CNI_ARGS IP", ip); err != nil {
					return nil, err
				}
			}
		}
	}
	if c.Args != nil {
		for _, ip := range c.Args.CNI.IPs {
			if err := add(protocol.CodeInvalidConfig, "args.cni.ips", ip); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := c.RuntimeConfig["ips"]; ok {
		list, ok := raw.([]any)
		if !ok {
			return nil, protocol.Errorf(protocol.CodeInvalidConfig, "runtimeConfig.ips must be a list of strings")
		}
		for _, v := range list {
			s, ok := v.(string)
			if !ok {
				return nil, protocol.Errorf(protocol.CodeInvalidConfig, "runtimeConfig.ips must be a list of strings")
			}
			if err := add(protocol.CodeInvalidConfig, "runtimeConfig.ips", s); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// readSubnetFile is subnetenv.Read, but opens the file without the
// runtime's poller (see hostlocal's file.go): ADD's first file would
// otherwise set the poller up.
func readSubnetFile(path string) (subnetenv.Env, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return subnetenv.Env{}, fmt.Errorf("%w: %s (is flanneld running?)", subnetenv.ErrNotExist, path)
	}
	if err != nil {
		return subnetenv.Env{}, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return subnetenv.Parse(path, f)
}
