package ipvs

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

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
	// Tables is the table as written per nft family ("" once deleted).
	Tables map[string]string
	// Scripts are the nft scripts applied, in order.
	Scripts []string
	// VIPRequests counts VIPs, AddVIPs and DelVIPs calls; NodeAddrCalls
	// NodeAddrs calls.
	VIPRequests, NodeAddrCalls int
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
	h.VIPRequests++
	var out []netip.Addr
	for a := range h.vips {
		if f.Contains(a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// AddVIPs implements Host: EEXIST for an address bound already, as the
// kernel answers, after binding those before it.
func (h *FakeHost) AddVIPs(addrs []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.VIPRequests++
	for _, a := range addrs {
		switch {
		case !h.device:
			return fmt.Errorf("bind %s to %s: no such device", a, DeviceName)
		case h.vips[a]:
			return fmt.Errorf("bind %s to %s: %w", a, DeviceName, unix.EEXIST)
		}
		h.vips[a] = true
	}
	return nil
}

// DelVIPs implements Host.
func (h *FakeHost) DelVIPs(addrs []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.VIPRequests++
	for _, a := range addrs {
		delete(h.vips, a)
	}
	return nil
}

func (h *FakeHost) NodeAddrs(f proxy.Family) ([]netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.NodeAddrCalls++
	var out []netip.Addr
	for _, a := range h.Node {
		if f.Contains(a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// ApplyNft keeps the part of a whole-table script after the table's
// deletion (the table as written), or "" for a cleanup script; an element
// script (add/delete element lines) is applied to the table kept, all or
// nothing, with the kernel's errors: ENOENT for a missing table or a
// deleted element that is not there. Scripts records every script.
func (h *FakeHost) ApplyNft(_ context.Context, script string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Scripts = append(h.Scripts, script)
	if strings.HasPrefix(script, "table ") {
		fam, _, _ := strings.Cut(strings.TrimPrefix(script, "table "), " ")
		_, body, _ := strings.Cut(script, "delete table "+fam+" "+TableName+"\n")
		h.Tables[fam] = body
		return nil
	}
	tables := maps.Clone(h.Tables)
	for _, line := range strings.Split(strings.TrimSuffix(script, "\n"), "\n") {
		if err := applyElementLine(tables, line); err != nil {
			return fmt.Errorf("nft %q: %w", line, err)
		}
	}
	h.Tables = tables
	return nil
}

// applyElementLine applies "add|delete element <family> <table> <set> {
// e, … }" to the rendered tables.
func applyElementLine(tables map[string]string, line string) error {
	f := strings.SplitN(line, " ", 6)
	if len(f) != 6 || f[1] != "element" || (f[0] != "add" && f[0] != "delete") {
		return fmt.Errorf("not an element command")
	}
	body := tables[f[2]]
	if f[3] != TableName || body == "" {
		return unix.ENOENT
	}
	list := strings.TrimSuffix(strings.TrimPrefix(f[5], "{ "), " }")
	// The set's declaration, and its elements line if it has one.
	head := "\t" + "set " + f[4] + " {\n"
	at := strings.Index(body, head)
	if at < 0 {
		head = "\tmap " + f[4] + " {\n"
		if at = strings.Index(body, head); at < 0 {
			return unix.ENOENT
		}
	}
	end := at + strings.Index(body[at:], "\t}\n")
	decl := body[at:end]
	var elems []string
	if _, cur, ok := strings.Cut(decl, "\t\telements = { "); ok {
		elems = strings.Split(strings.TrimSuffix(cur, " }\n"), ", ")
		decl, _, _ = strings.Cut(decl, "\t\telements = { ")
	}
	for _, e := range strings.Split(list, ", ") {
		if f[0] == "add" {
			if !slices.Contains(elems, e) {
				elems = append(elems, e)
			}
			continue
		}
		// A map's element is deleted by its key.
		i := slices.IndexFunc(elems, func(have string) bool { k, _, _ := strings.Cut(have, " : "); return k == e })
		if i < 0 {
			return unix.ENOENT
		}
		elems = slices.Delete(elems, i, i+1)
	}
	slices.Sort(elems)
	if len(elems) > 0 {
		decl += "\t\telements = { " + strings.Join(elems, ", ") + " }\n"
	}
	tables[f[2]] = body[:at] + decl + body[end:]
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
