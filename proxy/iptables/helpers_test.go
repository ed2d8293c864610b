package iptables

import (
	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

// kernelRunner runs backend b's tools for family f inside the test
// namespace ns.
func kernelRunner(ns *nettest.NS, f proxy.Family, b ipt.Backend) *ipt.ExecRunner {
	return ipt.New(ipt.Prefixed("ip", "netns", "exec", ns.Name()), ipt.Family(f), b)
}
