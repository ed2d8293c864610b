package ipvs

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

func netipPrefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// nodadFlag skips duplicate address detection for IPv6 VIPs: a VIP is
// usable at once, and every node binds the same ones.
func nodadFlag(a netip.Addr) int {
	if a.Is6() {
		return unix.IFA_F_NODAD
	}
	return 0
}
