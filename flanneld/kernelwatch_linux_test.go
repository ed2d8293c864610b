package flanneld

import (
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestDeletedPeerStateRepairedAtOnce deletes node-a's route, neighbour and
// FDB entry for its vxlan peer by hand, with the periodic resync an hour
// away: the kernel watch must put each back (and traffic must flow), so a
// pass here cannot come from the resync.
func TestDeletedPeerStateRepairedAtOnce(t *testing.T) {
	nettest.SkipShort(t, "daemons on node namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "bridge")
	api := testapi.Start(t)
	startIPAM(t, api)
	c := newTestCluster(t, api, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, 2)
	for _, nd := range c.nodes {
		o := c.options(nd)
		o.ResyncPeriod = time.Hour
		c.startWith(nd, o)
		c.wirePod(nd)
	}
	a, b := c.nodes[0], c.nodes[1]
	mustPing(t, a.pod, b.podIP)
	peer := c.subnet(b)
	var before kernelState
	testapi.Eventually(t, 20*time.Second, "node-a programmed for node-b", func() bool {
		before = readKernel(t, a, "flannel.1")
		_, ok := before.routeTo(peer)
		return ok && len(before.neigh) == 1 && len(before.fdb) == 1
	})
	route, _ := before.routeTo(peer)
	neigh, fdb := before.neigh[0], before.fdb[0]
	for _, del := range []struct {
		what string
		cmd  []string
		back func(kernelState) bool
	}{
		{"route", []string{"ip", "route", "del", peer.String()}, func(s kernelState) bool { r, ok := s.routeTo(peer); return ok && r.Gw == route.Gw }},
		{"neighbour", []string{"ip", "neigh", "del", neigh.IP.String(), "dev", "flannel.1"}, func(s kernelState) bool { _, ok := s.neighFor(neigh.IP); return ok }},
		{"FDB entry", []string{"bridge", "fdb", "del", fdb.MAC.String(), "dev", "flannel.1", "dst", fdb.Dst.String()}, func(s kernelState) bool { _, ok := s.fdbFor(fdb.MAC.String()); return ok }},
	} {
		a.ns.MustExec(t, del.cmd[0], del.cmd[1:]...)
		testapi.Eventually(t, 20*time.Second, del.what+" restored without the resync", func() bool { return del.back(readKernel(t, a, "flannel.1")) })
		mustPing(t, a.pod, b.podIP)
	}
}
