package nftables

import "net/netip"

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }
