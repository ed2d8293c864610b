package iptables

import "github.com/nodenet/nodenet/proxy/proxytest"

// The snapshot builders are shared with the other data planes' tests.
var (
	mkPort        = proxytest.Port
	withEndpoints = proxytest.WithEndpoints
	mkSnap        = proxytest.Snapshot
	changed       = proxytest.Changed
	full          = proxytest.Full
)
