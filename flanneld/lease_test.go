package flanneld

import (
	"net"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodenet/nodenet/internal/testapi"
)

func TestVXLANDataWireFormat(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	if got := string(encodeVXLANData(1, mac)); got != `{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}` {
		t.Fatalf("backend-data %s: not upstream's encoding", got)
	}
	d, err := decodeVXLANData([]byte(`{"VNI":4096,"VtepMAC":"aa:bb:cc:dd:ee:ff"}`))
	if err != nil || d.VNI != 4096 || net.HardwareAddr(d.VtepMAC).String() != "aa:bb:cc:dd:ee:ff" {
		t.Fatalf("%+v %v", d, err)
	}
	for _, bad := range []string{"", "null", `{"VNI":1}`, `{"VtepMAC":"zz"}`} {
		if _, err := decodeVXLANData([]byte(bad)); err == nil {
			t.Fatalf("%q decoded", bad)
		}
	}
}

// TestPublishedAnnotations: upstream's AcquireLease rules, including
// public-ip-overwrite replacing the address peers see.
func TestPublishedAnnotations(t *testing.T) {
	attrs := LocalAttrs{PublicIP: netip.MustParseAddr("192.168.50.11"), BackendType: BackendVXLAN, BackendData: []byte(`{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}`)}
	got := publishedAnnotations(map[string]string{AnnPublicIPOverwrite: "203.0.113.7"}, attrs)
	want := map[string]string{AnnKubeSubnetManager: "true", AnnBackendType: "vxlan", AnnPublicIP: "203.0.113.7", AnnBackendData: `{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}`}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}
	if needsPatch(got, want) || !needsPatch(map[string]string{}, want) {
		t.Fatal("needsPatch")
	}
	hg := publishedAnnotations(nil, LocalAttrs{PublicIP: attrs.PublicIP, PublicIPv6: netip.MustParseAddr("fd00:50::11"), BackendType: BackendHostGW})
	if hg[AnnBackendData] != "null" || hg[AnnBackendV6Data] != "null" || hg[AnnPublicIPv6] != "fd00:50::11" {
		t.Fatalf("host-gw dual-stack: %v", hg)
	}
}

// TestNodeLease reads a node as upstream flannel publishes it, and skips
// nodes that do not take part.
func TestNodeLease(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "up", Annotations: map[string]string{
		AnnKubeSubnetManager: "true", AnnBackendType: "vxlan", AnnPublicIP: "192.168.50.12",
		AnnBackendData: `{"VNI":1,"VtepMAC":"02:00:00:00:00:02"}`, AnnPublicIPv6: "fd00:50::12", AnnBackendV6Data: `{"VNI":1,"VtepMAC":"02:00:00:00:00:03"}`,
	}}, Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24", PodCIDRs: []string{"10.244.2.0/24", "fd00:10:244:2::/64"}}}
	l, ok, err := nodeLease(n)
	if err != nil || !ok || l.Subnet.String() != "10.244.2.0/24" || l.IPv6Subnet.String() != "fd00:10:244:2::/64" ||
		l.PublicIP.String() != "192.168.50.12" || l.PublicIPv6.String() != "fd00:50::12" || l.BackendType != "vxlan" {
		t.Fatalf("%+v %v %v", l, ok, err)
	}
	n.Annotations[AnnPublicIP] = "not-an-ip"
	if _, _, err := nodeLease(n); err == nil {
		t.Fatal("bad public-ip accepted")
	}
	delete(n.Annotations, AnnKubeSubnetManager)
	if _, ok, _ := nodeLease(n); ok {
		t.Fatal("node without kube-subnet-manager taken as a peer")
	}
}

// TestNodePublicIPAnnotation: an administrator's node-public-ip(v6) pins
// the address the daemon publishes.
func TestNodePublicIPAnnotation(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
		AnnNodePublicIP: "198.51.100.4", AnnNodePublicIPv6: "2001:db8::4", AnnBackendData: `{"VNI":1,"VtepMAC":"02:00:00:00:00:09"}`}}})
	cfg := mustConfig(t, `{"Network":"10.244.0.0/16"}`)
	m := newKubeManager(client, "n1", cfg, func() {}, testapi.Logger())
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	s := m.Self()
	if s.NodePublicIP.String() != "198.51.100.4" || s.NodePublicIPv6.String() != "2001:db8::4" {
		t.Fatalf("%+v", s)
	}
	if d, err := decodeVXLANData(s.BackendData); err != nil || net.HardwareAddr(d.VtepMAC).String() != "02:00:00:00:00:09" {
		t.Fatalf("previous VTEP MAC not found: %v", err)
	}
}
