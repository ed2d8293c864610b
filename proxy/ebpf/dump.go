package ebpf

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nodenet/nodenet/proxy"
)

// dump renders the service and backend maps one entry point a line,
// sorted, so a person (and a golden test) can read what the programs see:
//
//	tcp 10.96.0.10:53 -> 10.244.1.2:53 10.244.2.2:53
//	tcp 10.96.0.11:80 affinity=3h0m0s -> 10.244.1.3:80
//	udp 10.96.0.12:53 -> refused
//	tcp 192.168.60.10:80 -> refused
//	tcp 192.168.60.10:80 (inside) -> 10.244.2.2:80
//
// The "(inside)" line is an eTP=Local entry point's inside entry: what this
// node's sockets (and pods, on the tc path) reach there.
// Backends are listed in slot order; a slot missing from the backends map
// shows as "<missing>".
func dump(f proxy.Family, services table[svcKey, svcValue], backends table[backendKey, addrPort]) (string, error) {
	svcs, err := services.All()
	if err != nil {
		return "", err
	}
	bes, err := backends.All()
	if err != nil {
		return "", err
	}
	protoNames := map[uint8]string{}
	for p, n := range protoNumbers {
		protoNames[n] = p.Lower()
	}
	var lines []string
	for k, v := range svcs {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s%s", protoNames[k.Proto], entryAddr(k, f), scopeSuffix(k))
		if v.Flags&flagAffinity != 0 {
			fmt.Fprintf(&b, " affinity=%v", time.Duration(v.Affinity)*time.Second)
		}
		b.WriteString(" ->")
		if v.Count == 0 {
			b.WriteString(" refused")
		}
		for i := range v.Count {
			be, ok := bes[backendKey{Id: v.Id, Slot: i}]
			if !ok {
				b.WriteString(" <missing>")
				continue
			}
			fmt.Fprintf(&b, " %s", netipAddrPort(be.Addr, be.Port, f))
		}
		lines = append(lines, b.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

// Dump shows this data plane's service table (see dump); it needs a first
// Sync to have opened the maps.
func (d *DataPlane) Dump() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == nil {
		return "", fmt.Errorf("%s data plane not loaded yet", d.cfg.Family)
	}
	out, err := dump(d.cfg.Family, d.state.services, d.state.backends)
	if err != nil {
		return "", err
	}
	return withLocalAddrs(out, d.local.addrs()), nil
}

// withLocalAddrs appends the addresses wildcard NodePorts ("*:port" lines)
// answer on to a dump:
//
//	local addresses (NodePorts on *): 192.168.1.10 10.0.0.5
func withLocalAddrs(table string, addrs []netip.Addr) string {
	var b strings.Builder
	b.WriteString("local addresses (NodePorts on *):")
	for _, a := range addrs {
		fmt.Fprintf(&b, " %s", a)
	}
	if table == "" {
		return b.String()
	}
	return table + "\n" + b.String()
}

// DumpPinned shows the service table and the local addresses pinned in pinDir (one family's
// directory, FamilyPinDir) without loading anything: what `nodenet proxy
// --proxy-mode ebpf --dump` prints while a proxy runs, or after it exited.
func DumpPinned(pinDir string, f proxy.Family) (string, error) {
	open := func(name string) (*ebpf.Map, error) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			return nil, fmt.Errorf("open pinned %s map in %s (is the ebpf proxy running there?): %w", name, pinDir, err)
		}
		return m, nil
	}
	svcs, err := open(socklbMapServices)
	if err != nil {
		return "", err
	}
	defer svcs.Close()
	bes, err := open(socklbMapBackends)
	if err != nil {
		return "", err
	}
	defer bes.Close()
	out, err := dump(f, kernelTable[svcKey, svcValue]{svcs}, kernelTable[backendKey, addrPort]{bes})
	if err != nil {
		return "", err
	}
	local, err := open(socklbMapLocalAddrs)
	if err != nil {
		return "", err
	}
	defer local.Close()
	all, err := kernelTable[localAddr, uint8]{local}.All()
	if err != nil {
		return "", err
	}
	set := make(map[localAddr]bool, len(all))
	for k := range all {
		set[k] = true
	}
	return withLocalAddrs(out, sortedAddrs(set, f)), nil
}
