package nftables

import (
	"net/netip"

	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// The snapshot builders are shared with the other data planes' tests.
type svcOpt = proxytest.PortOpt

var (
	spName             = proxytest.PortName
	mkPort             = proxytest.Port
	withEndpoints      = proxytest.WithEndpoints
	withLocalEndpoints = proxytest.WithLocalEndpoints
	withNodePort       = proxytest.WithNodePort
	withExternalIPs    = proxytest.WithExternalIPs
	withLB             = proxytest.WithLB
	withETPLocal       = proxytest.WithETPLocal
	withITPLocal       = proxytest.WithITPLocal
	withAffinity       = proxytest.WithAffinity
	mkSnap             = proxytest.Snapshot
	changed            = proxytest.Changed
	full               = proxytest.Full
)

func withMasqueradeAll(s *proxy.Snapshot) *proxy.Snapshot { s.MasqueradeAll = true; return s }

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }
