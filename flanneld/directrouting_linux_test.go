package flanneld

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestVXLANDirectRouting: peers on our L2 network get a plain route via
// their public IP and no vxlan entries; a peer elsewhere goes through
// flannel.1. The daemons run with EnableNFTables, so this is also the
// end-to-end test of the nftables masquerade backend (and of the iptables
// one being left empty).
func TestVXLANDirectRouting(t *testing.T) {
	nettest.SkipShort(t, "daemons on several node namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	api := testapi.Start(t)
	startIPAM(t, api, "10.248.0.0/16")
	c := newTestCluster(t, api, `{"Network":"10.248.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan","DirectRouting":true}}`, 2)
	c.lan.MustExec(t, "ip", "addr", "add", "192.168.50.1/24", "dev", "br0")
	for _, nd := range c.nodes {
		c.start(nd)
		c.wirePod(nd)
	}
	n1, n2 := c.nodes[0], c.nodes[1]
	mustPing(t, n1.pod, n2.podIP)
	mustPing(t, n1.pod, netip.MustParseAddr("192.168.50.1")) // masqueraded by nftables
	s := readKernel(t, n1, "flannel.1")
	if r, ok := s.routeTo(c.subnet(n2)); !ok || r.Gw != n2.ip || r.Dev != "eth0" || len(s.neigh) != 0 || len(s.fdb) != 0 {
		t.Fatalf("direct route to %s: %+v %v; neigh %v fdb %v", n2.name, r, ok, s.neigh, s.fdb)
	}
	rs := string(n1.ns.MustExec(t, "nft", "list", "table", "ip", nftTable))
	if !strings.Contains(rs, "masquerade fully-random") {
		t.Fatalf("nft table:\n%s", rs)
	}
	if out := string(n1.ns.MustExec(t, "iptables-save")); strings.Contains(out, chainMasq) {
		t.Fatalf("iptables chains with the nftables backend:\n%s", out)
	}
	far := "directrouting-far"
	_, err := api.Client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: far, Annotations: map[string]string{
		AnnKubeSubnetManager: "true", AnnBackendType: "vxlan", AnnPublicIP: "10.99.0.7", AnnBackendData: `{"VNI":1,"VtepMAC":"02:00:00:00:77:01"}`}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sn := c.subnet(&testNode{name: far})
	testapi.Eventually(t, 10*time.Second, "off-L2 peer through flannel.1", func() bool {
		s := readKernel(t, n1, "flannel.1")
		r, ok := s.routeTo(sn)
		_, nok := s.neighFor(sn.Addr())
		f, fok := s.fdbFor("02:00:00:00:77:01")
		return ok && r.Dev == "flannel.1" && nok && fok && f.Dst.String() == "10.99.0.7"
	})
}
