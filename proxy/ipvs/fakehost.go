package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nodenet/nodenet/proxy"
)

// FakeHost is a stateful in-memory Host: a device with addresses, fixed
// node addresses and the last nft script per family.
type FakeHost struct {
	mu     sync.Mutex
	device bool
	vips   map[netip.Addr]bool
	// Node are the node's own addresses.
	Node []netip.Addr
	// Tables is the last script applied per nft family ("" once deleted).
	Tables map[string]string
}

// NewFakeHost has node addresses 192.168.0.10 and fd00:192:168::10.
func NewFakeHost() *FakeHost {
	return &FakeHost{vips: map[netip.Addr]bool{}, Tables: map[string]string{},
		Node: []netip.Addr{netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("fd00:192:168::10")}}
}

func (h *FakeHost) EnsureDevice() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.device = true
	return nil
}

func (h *FakeHost) DeviceExists() (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.device, nil
}

func (h *FakeHost) RemoveDevice() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.device, h.vips = false, map[netip.Addr]bool{}
	return nil
}

func (h *FakeHost) VIPs(f proxy.Family) ([]netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []netip.Addr
	for a := range h.vips {
		if f.Contains(a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (h *FakeHost) AddVIP(a netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.device {
		return fmt.Errorf("bind %s to %s: no such device", a, DeviceName)
	}
	h.vips[a] = true
	return nil
}

func (h *FakeHost) DelVIP(a netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.vips, a)
	return nil
}

func (h *FakeHost) NodeAddrs(f proxy.Family) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range h.Node {
		if f.Contains(a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// ApplyNft keeps the part of the script after the table's deletion (the
// table as written), or "" for a cleanup script.
func (h *FakeHost) ApplyNft(_ context.Context, script string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	fam, _, _ := strings.Cut(strings.TrimPrefix(script, "table "), " ")
	_, body, _ := strings.Cut(script, "delete table "+fam+" "+TableName+"\n")
	h.Tables[fam] = body
	return nil
}

func (h *FakeHost) NftTableExists(_ context.Context, family, table string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return table == TableName && h.Tables[family] != "", nil
}

// RecordedNodePorts implements Host from the nodeports set of the last
// script.
func (h *FakeHost) RecordedNodePorts(_ context.Context, f proxy.Family) ([]ServiceKey, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, set, ok := strings.Cut(h.Tables[nftFamily(f)], "\tset "+setNodePorts+" {\n")
	if !ok {
		return nil, nil
	}
	set, _, _ = strings.Cut(set, "\t}\n")
	_, elems, ok := strings.Cut(set, "elements = { ")
	if !ok {
		return nil, nil
	}
	elems, _, _ = strings.Cut(elems, " }")
	var out []ServiceKey
	for _, e := range strings.Split(elems, ", ") {
		f := strings.Split(e, " . ")
		if len(f) != 3 {
			return nil, fmt.Errorf("nodeports element %q", e)
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			return nil, fmt.Errorf("nodeports element %q: %w", e, err)
		}
		port, err := strconv.ParseUint(f[2], 10, 16)
		if err != nil {
			return nil, fmt.Errorf("nodeports element %q: %w", e, err)
		}
		out = append(out, ServiceKey{Addr: a, Port: uint16(port), Protocol: proxy.Protocol(strings.ToUpper(f[1]))})
	}
	return out, nil
}

// Dump renders IPVS, the VIPs and the nft table of family f, for golden
// files.
func Dump(f proxy.Family, h Handle, host *FakeHost) string {
	var b strings.Builder
	svcs, _ := h.Services()
	SortServices(svcs)
	for _, s := range svcs {
		fmt.Fprintf(&b, "-A %s %s flags 0x%x timeout %v\n", s, s.Scheduler, s.Flags, s.Timeout)
		ds, _ := h.Destinations(s.Key())
		SortDestinations(ds)
		for _, d := range ds {
			fmt.Fprintf(&b, "  -> %s weight %d\n", d.Key(), d.Weight)
		}
	}
	vips, _ := host.VIPs(f)
	for _, a := range vips {
		fmt.Fprintf(&b, "addr %s dev %s\n", a, DeviceName)
	}
	host.mu.Lock()
	b.WriteString(host.Tables[nftFamily(f)])
	host.mu.Unlock()
	return b.String()
}

var _ Host = (*FakeHost)(nil)
