package routes

import (
	"bytes"
	"net"
	"net/netip"
)

// Neigh is a permanent neighbour (ARP or NDP) entry on one device: IP
// resolves to MAC without the kernel ever asking the wire. The vxlan
// backend installs one per peer: peer VTEP address → peer VTEP MAC.
type Neigh struct {
	IP  netip.Addr
	MAC net.HardwareAddr
}

func (n Neigh) String() string { return n.IP.String() + " lladdr " + n.MAC.String() }

// FDBEntry is a permanent forwarding-database entry on a vxlan device:
// frames for MAC are encapsulated to the VTEP at Dst.
type FDBEntry struct {
	MAC net.HardwareAddr
	Dst netip.Addr
}

func (e FDBEntry) String() string { return e.MAC.String() + " dst " + e.Dst.String() }

// DiffNeigh returns the entries to set (missing, or resolving to another
// MAC) and those to delete (IPs nobody wants). Set replaces in place, so a
// MAC change is one set and never a window without an entry.
func DiffNeigh(desired, current []Neigh) (set, del []Neigh) {
	cur := make(map[netip.Addr]net.HardwareAddr, len(current))
	for _, c := range current {
		cur[c.IP] = c.MAC
	}
	want := make(map[netip.Addr]bool, len(desired))
	for _, d := range desired {
		if want[d.IP] {
			continue
		}
		want[d.IP] = true
		if mac, ok := cur[d.IP]; !ok || !bytes.Equal(mac, d.MAC) {
			set = append(set, d)
		}
	}
	for _, c := range current {
		if !want[c.IP] {
			del = append(del, c)
		}
	}
	return set, del
}

// DiffFDB returns the entries to set (MACs missing or pointing elsewhere)
// and those to delete (MACs nobody wants). The kernel keys a vxlan FDB entry
// by MAC, so a peer that changed its VTEP MAC shows up as a set of the new
// MAC and a delete of the old one.
func DiffFDB(desired, current []FDBEntry) (set, del []FDBEntry) {
	cur := make(map[string][]netip.Addr, len(current))
	for _, c := range current {
		cur[c.MAC.String()] = append(cur[c.MAC.String()], c.Dst)
	}
	want := make(map[string]netip.Addr, len(desired))
	for _, d := range desired {
		k := d.MAC.String()
		if _, dup := want[k]; dup {
			continue
		}
		want[k] = d.Dst
		if dsts := cur[k]; len(dsts) != 1 || dsts[0] != d.Dst {
			set = append(set, d)
		}
	}
	for _, c := range current {
		if dst, ok := want[c.MAC.String()]; !ok || dst != c.Dst {
			del = append(del, c)
		}
	}
	return set, del
}
