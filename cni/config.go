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

	"github.com/nodenet/nodenet/flanneld/subnetenv"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Plugin types the binary answers to.
const (
	TypeNodenet = "nodenet"
	TypeFlannel = "flannel"
)

// Defaults shared with flannel and the reference plugins.
const (
	DefaultBridge        = "cni0"
	DefaultSubnetFile    = subnetenv.DefaultPath
	DefaultFlannelDir    = "/var/lib/cni/flannel"
	DefaultBridgeMTU     = 1500
	defaultDelegateType  = "bridge"
	defaultDelegateIPAM  = "host-local"
	validAttachmentsKey  = "cni.dev/valid-attachments"
	legacyAttachmentsKey = "cni.dev/attachments"
)

// NetConf is the configuration on stdin. Fields of both types are listed:
// "type": "nodenet" uses the bridge/IPAM fields directly, "type": "flannel"
// uses subnetFile, dataDir (the delegate cache), delegate and ipam, the
// keys upstream flannel's CNI plugin reads.
type NetConf struct {
	CNIVersion       string          `json:"cniVersion"`
	Name             string          `json:"name"`
	Type             string          `json:"type"`
	DNS              DNS             `json:"dns"`
	RawPrevResult    json.RawMessage `json:"prevResult,omitempty"`
	ValidAttachments []GCAttachment  `json:"cni.dev/valid-attachments,omitempty"`
	// LegacyAttachments is the key libcni also sends for plugins written
	// against an earlier draft of the GC spec.
	LegacyAttachments []GCAttachment `json:"cni.dev/attachments,omitempty"`

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
	PrevResult *Result `json:"-"`
}

// GCAttachment is an entry of cni.dev/valid-attachments.
type GCAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// ParseConfig decodes and validates stdin. Decoding problems are code 6,
// invalid values code 7.
func ParseConfig(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := decodeConf(stdin, &c); err != nil {
		return nil, errorf(CodeDecode, "decode network configuration: %w", err)
	}
	if c.CNIVersion == "" {
		return nil, errorf(CodeInvalidConfig, "network configuration: cniVersion is missing")
	}
	if !supported(c.CNIVersion) {
		return nil, errorf(CodeIncompatibleVersion, "network configuration: cniVersion %q is not one of %v", c.CNIVersion, SupportedVersions)
	}
	if c.Name == "" {
		return nil, errorf(CodeInvalidConfig, "network configuration: name is missing")
	}
	if !validName(c.Name) {
		return nil, errorf(CodeInvalidConfig, "network configuration: name %q: invalid characters found in network name", c.Name)
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
		return nil, errorf(CodeInvalidConfig, "network configuration: type %q is neither %q nor %q", c.Type, TypeNodenet, TypeFlannel)
	}
	if len(c.RawPrevResult) > 0 && string(c.RawPrevResult) != "null" {
		c.PrevResult = new(Result)
		if err := json.Unmarshal(c.RawPrevResult, c.PrevResult); err != nil {
			return nil, errorf(CodeDecode, "network configuration: prevResult: %w", err)
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
	if err := validateIfName(c.Bridge); err != nil {
		return errorf(CodeInvalidConfig, "network configuration: bridge %q: %w", c.Bridge, err)
	}
	if c.SubnetFile == "" {
		c.SubnetFile = DefaultSubnetFile
	}
	if c.DataDir == "" {
		c.DataDir = hostlocal.DefaultDataDir
	}
	if c.MTU < 0 || c.MTU > 65535 || (c.MTU > 0 && c.MTU < 68) {
		return errorf(CodeInvalidConfig, "network configuration: mtu %d is outside 68..65535", c.MTU)
	}
	for i, set := range c.Ranges {
		canon, err := set.Canonical()
		if err != nil {
			return errorf(CodeInvalidConfig, "network configuration: ranges[%d]: %w", i, err)
		}
		c.Ranges[i] = canon
	}
	if c.Delegate != nil {
		return errorf(CodeInvalidConfig, "network configuration: delegate is a %q key; type %q does the bridge itself", TypeFlannel, TypeNodenet)
	}
	if c.IPAM != nil {
		// Accepting it would silently allocate from subnet.env instead.
		return errorf(CodeInvalidConfig, "network configuration: type %q allocates addresses itself; use ranges instead of ipam", TypeNodenet)
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
			return errorf(CodeInvalidConfig, "network configuration: delegate.type must be a string")
		}
	}
	for _, k := range []string{"name", "ipam"} {
		if _, ok := c.Delegate[k]; ok {
			return errorf(CodeInvalidConfig, "network configuration: delegate must not have %q, flannel sets it", k)
		}
	}
	return nil
}

// validateArgs checks what the dispatcher checks before calling a
// command, for callers that use Plugin in-process: the container ID ends
// up in file names, the interface name in netlink requests.
func validateArgs(args *CmdArgs) error {
	if err := validateContainerID(args.ContainerID); err != nil {
		return err
	}
	if err := validateIfName(args.IfName); err != nil {
		return errorf(CodeBadEnv, "CNI_IFNAME %q: %w", args.IfName, err)
	}
	return nil
}

func validateContainerID(id string) error {
	if id == "" {
		return errorf(CodeBadEnv, "CNI_CONTAINERID is missing")
	}
	if !validName(id) {
		return errorf(CodeBadEnv, "CNI_CONTAINERID %q: invalid characters in containerID", id)
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
	routes       []*Route
	dns          DNS
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
		return env, errorf(CodeTryAgainLater, "subnet file %s is malformed: key %s: %s", ke.Path, ke.Key, ke.Problem)
	}
	return env, errorf(CodeTryAgainLater, "read subnet file: %w", err)
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
				return nil, errorf(CodeTryAgainLater, "subnet file %s: %w", c.SubnetFile, err)
			}
			n.rangeSets = append(n.rangeSets, set)
		}
		nw := env.Network
		if v6 {
			nw = env.IPv6Network
		}
		n.routes = append(n.routes, &Route{Dst: nw})
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
			return errorf(code, "%s: %q is not an IP address", src, s)
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
				return nil, errorf(CodeBadEnv, "CNI_ARGS: %q is not KEY=VALUE", kv)
			}
			if k != "IP" {
				continue
			}
			for _, ip := range strings.Split(v, ",") {
				if err := add(CodeBadEnv, "CNI_ARGS IP", ip); err != nil {
					return nil, err
				}
			}
		}
	}
	if c.Args != nil {
		for _, ip := range c.Args.CNI.IPs {
			if err := add(CodeInvalidConfig, "args.cni.ips", ip); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := c.RuntimeConfig["ips"]; ok {
		list, ok := raw.([]any)
		if !ok {
			return nil, errorf(CodeInvalidConfig, "runtimeConfig.ips must be a list of strings")
		}
		for _, v := range list {
			s, ok := v.(string)
			if !ok {
				return nil, errorf(CodeInvalidConfig, "runtimeConfig.ips must be a list of strings")
			}
			if err := add(CodeInvalidConfig, "runtimeConfig.ips", s); err != nil {
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
