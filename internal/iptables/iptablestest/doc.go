// Package iptablestest sets up firewalls for tests of the components that
// program iptables through internal/iptables: a throwaway namespace whose
// rules already live in iptables-legacy, to check that a component follows
// the node's backend instead of the host's default.
package iptablestest
