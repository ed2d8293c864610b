package flanneld

import (
	"net/netip"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

func TestLookupExtIface(t *testing.T) {
	ns, a, b := nettest.New(t), nettest.New(t), nettest.New(t)
	nettest.Link(t, ns, "eth0", "192.168.50.11/24", a, "eth0", "192.168.50.1/24")
	nettest.Link(t, ns, "ens5", "10.1.0.2/24", b, "eth0", "10.1.0.1/24")
	ns.MustExec(t, "ip", "route", "add", "default", "via", "192.168.50.1")
	ns.MustExec(t, "ip", "link", "set", "ens5", "mtu", "9000")
	h := ns.Handle()
	for _, tc := range []struct {
		name    string
		o       IfaceOptions
		iface   string
		ip, pub string
	}{
		{"default route", IfaceOptions{}, "eth0", "192.168.50.11", "192.168.50.11"},
		{"by name, first match wins", IfaceOptions{Ifaces: []string{"wlan0", "ens5", "eth0"}}, "ens5", "10.1.0.2", "10.1.0.2"},
		{"by ip", IfaceOptions{Ifaces: []string{"10.1.0.2"}}, "ens5", "10.1.0.2", "10.1.0.2"},
		{"regex on name", IfaceOptions{IfaceRegex: []string{"^ens"}}, "ens5", "10.1.0.2", "10.1.0.2"},
		{"regex on address", IfaceOptions{IfaceRegex: []string{`^192\.168\.`}}, "eth0", "192.168.50.11", "192.168.50.11"},
		{"can reach", IfaceOptions{CanReach: "10.1.0.77"}, "ens5", "10.1.0.2", "10.1.0.2"},
		{"public ip", IfaceOptions{PublicIP: netip.MustParseAddr("203.0.113.9")}, "eth0", "192.168.50.11", "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.IPv4 = true
			e, err := LookupExtIface(h, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if e.Name != tc.iface || e.IP.String() != tc.ip || e.PublicIP.String() != tc.pub {
				t.Fatalf("got %s %s public %s", e.Name, e.IP, e.PublicIP)
			}
			if e.Name == "ens5" && e.MTU != 9000 {
				t.Fatalf("mtu %d", e.MTU)
			}
			if !e.OnLink(netip.MustParseAddr(tc.ip)) || e.OnLink(netip.MustParseAddr("172.16.0.1")) {
				t.Fatalf("connected %v", e.Connected)
			}
		})
	}
	if _, err := LookupExtIface(h, IfaceOptions{Ifaces: []string{"eth0"}, IPv4: true, IPv6: true}); err == nil {
		t.Fatal("IPv6 enabled without an IPv6 address accepted")
	}
}
