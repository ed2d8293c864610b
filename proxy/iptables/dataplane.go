package iptables

import "github.com/nodenet/nodenet/proxy"

// The core takes a Proxier as a proxy.DataPlane and finds its integrity
// check by a type assertion at run time; these make a signature that
// drifts from either interface a compile error instead of a data plane
// the core cannot use or a canary that silently never runs.
var (
	_ proxy.DataPlane        = (*Proxier)(nil)
	_ proxy.IntegrityChecker = (*Proxier)(nil)
)

// With iptables-nft a Proxier announces removals (see WatchChanges).
var _ proxy.ChangeWatcher = (*Proxier)(nil)
