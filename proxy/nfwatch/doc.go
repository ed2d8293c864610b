// Package nfwatch tells a data plane, within milliseconds, that someone
// deleted nf_tables state it may own: it subscribes to the kernel's
// nf_tables notifications (NETLINK_NETFILTER, multicast group
// NFNLGRP_NFTABLES) in one network namespace and reports every deletion of
// a table, chain, rule, set, set element, object or flowtable in the
// tables the caller names.
//
// The nftables proxier watches its own table; the iptables proxier, with
// the iptables-nft backend, watches the nat and filter tables iptables-nft
// keeps in nf_tables. iptables-legacy programs x_tables, which announces
// nothing: that backend has only the core's periodic integrity check.
//
// A notification says only that something may be gone, not what: the
// data plane's own syncs delete rules and elements too, so the receiver
// (the proxy core) coalesces the signals and answers them with a cheap
// integrity check, and repairs only when that check fails.
package nfwatch
