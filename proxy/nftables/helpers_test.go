package nftables

import (
	"net/netip"

	"github.com/nodenet/nodenet/proxy/proxytest"
)

// The snapshot builders are shared with the other data planes' tests.
var (
	spName        = proxytest.PortName
	mkPort        = proxytest.Port
	withEndpoints = proxytest.WithEndpoints
	withNodePort  = proxytest.WithNodePort
	withETPLocal  = proxytest.WithETPLocal
	withAffinity  = proxytest.WithAffinity
	mkSnap        = proxytest.Snapshot
	changed       = proxytest.Changed
	full          = proxytest.Full
)

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }
