package routes

import (
	"cmp"
	"fmt"

	"github.com/vishvananda/netlink"
)

// OpenHandle returns an rtnetlink handle whose socket lives in the network
// namespace ns (a path, an iproute2 name, or "" for the caller's own), for
// daemons that manage links and addresses beside their routes. The caller
// closes it. A socket timeout bounds every request, as for NetlinkTable.
func OpenHandle(ns string) (*netlink.Handle, error) {
	h, err := openHandle(ns)
	if err != nil {
		return nil, err
	}
	// netlink calls cannot take a ctx; a bound keeps a wedged request from
	// blocking a controller's worker forever.
	if err := h.SetSocketTimeout(socketTimeout); err != nil {
		h.Close()
		return nil, fmt.Errorf("set netlink socket timeout: %w", err)
	}
	return h, nil
}

// openTable opens a handle for one of the tables in ns and returns with
// it the label their errors give ns: "(own)" for the caller's namespace.
func openTable(ns string) (*netlink.Handle, string, error) {
	h, err := OpenHandle(ns)
	if err != nil {
		return nil, "", err
	}
	return h, cmp.Or(ns, "(own)"), nil
}
