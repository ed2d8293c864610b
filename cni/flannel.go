package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"

	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/subnetenv"
)

// The flannel-style config ("type": "flannel") is upstream flannel's
// meta-plugin: it renders a delegate configuration (by default bridge +
// host-local) from subnet.env and caches it in <dataDir>/<containerID>, so
// DEL tears down exactly what ADD set up even after subnet.env changed. We
// render and cache the same JSON, byte-compatible with upstream's, but run
// a bridge delegate in-process instead of exec'ing two more binaries. A
// cache written by upstream flannel before the switch is torn down the same
// way.

// delegateConf is the bridge delegate's configuration as the reference
// bridge plugin reads it; only what we implement is decoded.
type delegateConf struct {
	CNIVersion       string       `json:"cniVersion"`
	Name             string       `json:"name"`
	Type             string       `json:"type"`
	Bridge           string       `json:"bridge"`
	IsGateway        bool         `json:"isGateway"`
	IsDefaultGateway bool         `json:"isDefaultGateway"`
	ForceAddress     bool         `json:"forceAddress"`
	IPMasq           bool         `json:"ipMasq"`
	MTU              int          `json:"mtu"`
	HairpinMode      bool         `json:"hairpinMode"`
	PromiscMode      bool         `json:"promiscMode"`
	DNS              protocol.DNS `json:"dns"`
	IPAM             struct {
		Type    string               `json:"type"`
		DataDir string               `json:"dataDir"`
		Ranges  []hostlocal.RangeSet `json:"ranges"`
		Routes  []*protocol.Route    `json:"routes"`
	} `json:"ipam"`
}

// renderDelegate builds the delegate configuration exactly as upstream
// flannel does: defaults for type, ipMasq, mtu and isGateway, and an IPAM
// section with one range set per family and a route to each flannel
// network. It also returns the delegate's type (ParseConfig made sure a
// configured one is a string).
func renderDelegate(c *NetConf, env subnetenv.Env) (conf []byte, typ string, err error) {
	d := maps.Clone(c.Delegate)
	if d == nil {
		d = map[string]any{}
	}
	if c.RuntimeConfig != nil {
		d["runtimeConfig"] = c.RuntimeConfig
	}
	d["name"] = c.Name
	typ, ok := d["type"].(string)
	if !ok {
		typ = defaultDelegateType
		d["type"] = typ
	}
	if _, ok := d["ipMasq"]; !ok {
		d["ipMasq"] = !env.IPMasq
	}
	if _, ok := d["mtu"]; !ok {
		d["mtu"] = env.MTU
	}
	if typ == defaultDelegateType {
		if _, ok := d["isGateway"]; !ok {
			d["isGateway"] = true
		}
	}
	d["cniVersion"] = c.CNIVersion

	ipam := maps.Clone(c.IPAM)
	if ipam == nil {
		ipam = map[string]any{}
	}
	if _, ok := ipam["type"]; !ok {
		ipam["type"] = defaultDelegateIPAM
	}
	var ranges [][]map[string]any
	var routes []protocol.Route
	if raw, ok := ipam["routes"]; ok {
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &routes); err != nil {
			return nil, "", protocol.Errorf(protocol.CodeInvalidConfig, "network configuration: ipam.routes: %w", err)
		}
	}
	for _, v6 := range []bool{false, true} {
		_, subnet, ok := env.Gateway(v6)
		if !ok {
			continue
		}
		ranges = append(ranges, []map[string]any{{"subnet": subnet.String()}})
		nw := env.Network
		if v6 {
			nw = env.IPv6Network
		}
		routes = append(routes, protocol.Route{Dst: nw})
	}
	ipam["ranges"] = ranges
	ipam["routes"] = routes
	d["ipam"] = ipam
	b, err := json.Marshal(d)
	if err != nil {
		return nil, "", protocol.Errorf(protocol.CodeInvalidConfig, "render delegate configuration: %w", err)
	}
	return b, typ, nil
}

// delegateType reads the "type" of a rendered delegate.
func delegateType(b []byte) (string, error) {
	var t struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return "", protocol.Errorf(protocol.CodeDecode, "decode delegate configuration: %w", err)
	}
	return t.Type, nil
}

// bridgeNetwork resolves a bridge delegate configuration.
func bridgeNetwork(b []byte) (*network, error) {
	var d delegateConf
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, protocol.Errorf(protocol.CodeDecode, "decode delegate configuration: %w", err)
	}
	if d.IPAM.Type != defaultDelegateIPAM {
		return nil, protocol.Errorf(protocol.CodeInvalidConfig, "delegate ipam type %q: nodenet-cni allocates in-process and supports only %q", d.IPAM.Type, defaultDelegateIPAM)
	}
	n := &network{
		name: d.Name, cniVersion: d.CNIVersion, bridge: d.Bridge, mtu: d.MTU,
		hairpin: d.HairpinMode, isGateway: d.IsGateway || d.IsDefaultGateway, defaultRoute: d.IsDefaultGateway,
		ipMasq: d.IPMasq, forceAddress: d.ForceAddress, promisc: d.PromiscMode,
		dataDir: d.IPAM.DataDir, routes: d.IPAM.Routes, dns: d.DNS,
	}
	if n.bridge == "" {
		n.bridge = DefaultBridge
	}
	if n.mtu == 0 {
		n.mtu = DefaultBridgeMTU
	}
	if n.dataDir == "" {
		n.dataDir = hostlocal.DefaultDataDir
	}
	for i, set := range d.IPAM.Ranges {
		canon, err := set.Canonical()
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidConfig, "delegate ipam ranges[%d]: %w", i, err)
		}
		n.rangeSets = append(n.rangeSets, canon)
	}
	return n, nil
}

// flannelTeardownNetwork is the best guess at what a flannel-style ADD set
// up when its cache entry is gone: the delegate's defaults.
func flannelTeardownNetwork(c *NetConf) *network {
	n := &network{name: c.Name, cniVersion: c.CNIVersion, bridge: DefaultBridge, dataDir: hostlocal.DefaultDataDir}
	if b, ok := c.Delegate["bridge"].(string); ok && b != "" {
		n.bridge = b
	}
	if d, ok := c.IPAM["dataDir"].(string); ok && d != "" {
		n.dataDir = d
	}
	return n
}

func cachePath(dataDir, containerID string) string {
	return filepath.Join(dataDir, containerID)
}

// saveDelegate writes the cache entry like upstream (0600 in a 0700 dir),
// atomically so a crash cannot leave half a configuration for DEL.
func saveDelegate(dataDir, containerID string, conf []byte) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create delegate cache dir: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, "."+containerID+".*")
	if err != nil {
		return fmt.Errorf("write delegate cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(conf)
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), cachePath(dataDir, containerID))
	}
	if err != nil {
		return fmt.Errorf("write delegate cache: %w", err)
	}
	return nil
}

// loadDelegate returns the cached delegate configuration, or nil when there
// is none.
func loadDelegate(dataDir, containerID string) ([]byte, error) {
	b, err := os.ReadFile(cachePath(dataDir, containerID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read delegate cache: %w", err)
	}
	return b, nil
}

func removeDelegate(dataDir, containerID string) error {
	err := os.Remove(cachePath(dataDir, containerID))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove delegate cache: %w", err)
	}
	return nil
}

// gcDelegates removes the cache entries of this network whose container has
// no valid attachment. Entries of other networks sharing the directory are
// left alone.
func gcDelegates(dataDir, network string, valid map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read delegate cache dir: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || valid[e.Name()] || e.Name()[0] == '.' {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dataDir, e.Name()))
		if err != nil {
			continue
		}
		var d struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(b, &d) != nil || d.Name != network {
			continue
		}
		if err := removeDelegate(dataDir, e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}
