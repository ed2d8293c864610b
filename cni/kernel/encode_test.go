package kernel

import (
	"bytes"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

// The requests and answers below are written out by hand, as the kernel
// lays them out on a little-endian host.
func requireLittleEndian(t *testing.T) {
	t.Helper()
	if b := native.AppendUint16(nil, 1); b[0] != 1 {
		t.Skip("the expected byte sequences are written for little-endian hosts")
	}
}

func TestAddAddrRequest(t *testing.T) {
	requireLittleEndian(t)
	var w nlmsg.Writer
	addAddr(&w, 3, netip.MustParsePrefix("10.244.1.5/24"))
	got, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		48, 0, 0, 0, 20, 0, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, // RTM_NEWADDR, REQUEST|ACK|EXCL|CREATE
		2, 24, 0, 0, 3, 0, 0, 0, // ifaddrmsg: AF_INET /24 on index 3
		8, 0, 2, 0, 10, 244, 1, 5, // IFA_LOCAL
		8, 0, 1, 0, 10, 244, 1, 5, // IFA_ADDRESS
		8, 0, 4, 0, 10, 244, 1, 255, // IFA_BROADCAST
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("\n got %v\nwant %v", got, want)
	}
	w.Reset()
	addAddr(&w, 3, netip.MustParsePrefix("fd00::5/64"))
	got, _ = w.Bytes()
	if got[16] != unix.AF_INET6 || got[17] != 64 || got[18] != unix.IFA_F_NODAD || len(got) != 16+8+2*20 {
		t.Fatalf("IPv6 address request %v", got)
	}
}

func TestAddRouteRequest(t *testing.T) {
	requireLittleEndian(t)
	table := 1000
	var w nlmsg.Writer
	addRoute(&w, 4, Route{Dst: netip.MustParsePrefix("10.0.0.0/8"), GW: netip.MustParseAddr("10.244.1.1"), MTU: 1400, Table: &table})
	got, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		72, 0, 0, 0, 24, 0, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, // RTM_NEWROUTE, REQUEST|ACK|EXCL|CREATE
		2, 8, 0, 0, 0, unix.RTPROT_BOOT, 0, unix.RTN_UNICAST, 0, 0, 0, 0, // rtmsg: table in RTA_TABLE
		8, 0, 1, 0, 10, 0, 0, 0, // RTA_DST
		8, 0, 15, 0, 0xe8, 3, 0, 0, // RTA_TABLE 1000
		8, 0, 5, 0, 10, 244, 1, 1, // RTA_GATEWAY
		8, 0, 4, 0, 4, 0, 0, 0, // RTA_OIF
		12, 0, 8, 0, 8, 0, 2, 0, 0x78, 5, 0, 0, // RTA_METRICS { RTAX_MTU 1400 }
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("\n got %v\nwant %v", got, want)
	}
}

func TestDecodeAnswers(t *testing.T) {
	requireLittleEndian(t)
	link := []byte{
		0, 0, 1, 0, 7, 0, 0, 0, 0x43, 0x10, 1, 0, 0, 0, 0, 0, // ifinfomsg: index 7, UP|BROADCAST|RUNNING|MULTICAST|LOWER_UP
		10, 0, 3, 0, 'e', 't', 'h', '0', 0, 0, 0, 0, // IFLA_IFNAME (padded)
		8, 0, 4, 0, 0xaa, 5, 0, 0, // IFLA_MTU 1450
		8, 0, 5, 0, 9, 0, 0, 0, // IFLA_LINK 9
		10, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 0, // IFLA_ADDRESS
		16, 0, 0x12, 0x80, 9, 0, 1, 0, 'v', 'e', 't', 'h', 0, 0, 0, 0, // IFLA_LINKINFO (nested flag) { IFLA_INFO_KIND }
	}
	l, err := decodeLink(link)
	if err != nil || l.Index != 7 || l.Name != "eth0" || l.MTU != 1450 || l.Parent != 9 || l.Kind != "veth" || !l.Up() || l.MAC.String() != "02:00:00:00:00:01" {
		t.Fatalf("link %+v %v", l, err)
	}
	if _, err := decodeLink(link[:10]); err == nil {
		t.Error("short link message accepted")
	}
	route := []byte{
		2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0, // rtmsg: AF_INET, default route, main table
		8, 0, 5, 0, 10, 244, 1, 1, // RTA_GATEWAY
		8, 0, 4, 0, 7, 0, 0, 0, // RTA_OIF 7
	}
	if r, ok := decodeRoute(route, 7); !ok || r.Dst.String() != "0.0.0.0/0" || r.GW.String() != "10.244.1.1" {
		t.Fatalf("route %+v %v", r, ok)
	}
	if _, ok := decodeRoute(route, 8); ok {
		t.Error("route out of another link taken")
	}
	addr := []byte{
		10, 64, 0x80, 0, 7, 0, 0, 0, // ifaddrmsg: AF_INET6 /64
		20, 0, 1, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, // IFA_ADDRESS
	}
	if p, ok := decodeAddr(addr); !ok || p.String() != "fd00::5/64" {
		t.Fatalf("address %v %v", p, ok)
	}
}
