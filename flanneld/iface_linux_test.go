package flanneld

import (
	"errors"
	"net/netip"
	"regexp"
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
		{"regex on name", IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile("^ens")}}, "ens5", "10.1.0.2", "10.1.0.2"},
		{"regex on address", IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile(`^192\.168\.`)}}, "eth0", "192.168.50.11", "192.168.50.11"},
		{"can reach", IfaceOptions{CanReach: netip.MustParseAddr("10.1.0.77")}, "ens5", "10.1.0.2", "10.1.0.2"},
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
	// Upstream takes a link-local IPv6 address when there is no global one:
	// only an interface without any IPv6 address fails.
	ns.MustExec(t, "ip", "-6", "addr", "flush", "dev", "eth0")
	if _, err := LookupExtIface(h, IfaceOptions{Ifaces: []string{"eth0"}, IPv4: true, IPv6: true}); err == nil {
		t.Fatal("IPv6 enabled without an IPv6 address accepted")
	}
}

// TestLookupExtIfaceUpstreamSelection pins upstream flanneld v0.28.10's
// interface and address choice (pkg/ipmatch, pkg/ip): link-local addresses
// are usable when nothing better is there, a candidate without a usable
// address is skipped, regexes match addresses before names.
func TestLookupExtIfaceUpstreamSelection(t *testing.T) {
	ns, peer := nettest.New(t), nettest.New(t)
	nettest.Link(t, ns, "eth0", "192.168.50.11/24", peer, "p0", "192.168.50.1/24")
	nettest.Link(t, ns, "ll0", "169.254.10.2/16", peer, "p1", "169.254.10.1/16")
	// The link-local address goes on first: the global one must still win.
	nettest.Link(t, ns, "mixed0", "169.254.20.2/16", peer, "p2", "")
	ns.MustExec(t, "ip", "addr", "add", "10.2.0.2/24", "dev", "mixed0")
	nettest.Link(t, ns, "empty0", "", peer, "p3", "")
	ns.MustExec(t, "ip", "route", "add", "default", "via", "192.168.50.1")
	ns.MustExec(t, "ip", "-6", "addr", "add", "fe80::a:2/64", "dev", "ll0", "nodad")
	h := ns.Handle()
	for _, tc := range []struct {
		name   string
		o      IfaceOptions
		iface  string
		ip     string
		v6only bool
	}{
		{"iface with only a link-local address", IfaceOptions{Ifaces: []string{"ll0"}}, "ll0", "169.254.10.2", false},
		{"iface by link-local address", IfaceOptions{Ifaces: []string{"169.254.10.2"}}, "ll0", "169.254.10.2", false},
		{"global preferred over link-local", IfaceOptions{Ifaces: []string{"mixed0"}}, "mixed0", "10.2.0.2", false},
		{"iface by its link-local address pins it", IfaceOptions{Ifaces: []string{"169.254.20.2"}}, "mixed0", "169.254.20.2", false},
		{"iface without address skipped", IfaceOptions{Ifaces: []string{"empty0", "missing", "ll0"}}, "ll0", "169.254.10.2", false},
		{"regex after every iface failed", IfaceOptions{Ifaces: []string{"empty0"}, IfaceRegex: []*regexp.Regexp{regexp.MustCompile("^ll")}}, "ll0", "169.254.10.2", false},
		{"regex on a link-local address", IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile(`^169\.254\.20\.`)}}, "mixed0", "169.254.20.2", false},
		{"regex: addresses before names", IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile(`^(mixed0|192\.168\.50\.11)$`)}}, "eth0", "192.168.50.11", false},
		{"regex list in order", IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile("^empty"), regexp.MustCompile("^mixed")}}, "mixed0", "10.2.0.2", false},
		{"can reach a link-local peer", IfaceOptions{CanReach: netip.MustParseAddr("169.254.10.1")}, "ll0", "169.254.10.2", false},
		{"can reach after regexes failed", IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile("^wlan")}, CanReach: netip.MustParseAddr("10.2.0.9")}, "mixed0", "10.2.0.2", false},
		{"public ip held by an interface", IfaceOptions{PublicIP: netip.MustParseAddr("10.2.0.2")}, "mixed0", "10.2.0.2", false},
		{"IPv6 link-local only", IfaceOptions{Ifaces: []string{"ll0"}}, "ll0", "fe80::a:2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.IPv4, tc.o.IPv6 = !tc.v6only, tc.v6only
			e, err := LookupExtIface(h, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			got := e.IP
			if tc.v6only {
				got = e.IPv6
			}
			if e.Name != tc.iface || got.String() != tc.ip {
				t.Fatalf("got %s %s (v6 %s), want %s %s", e.Name, e.IP, e.IPv6, tc.iface, tc.ip)
			}
		})
	}
	for _, o := range []IfaceOptions{
		{Ifaces: []string{"empty0"}},
		{Ifaces: []string{"10.9.9.9"}},
		{IfaceRegex: []*regexp.Regexp{regexp.MustCompile("^empty")}},
	} {
		o.IPv4 = true
		if e, err := LookupExtIface(h, o); err == nil || !errors.Is(err, ErrNoInterface) {
			t.Fatalf("%+v: got %+v, %v; want ErrNoInterface", o, e, err)
		}
	}
}
