package hostlocal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// debianHostLocal is the reference binary from Debian's
// containernetworking-plugins package.
const debianHostLocal = "/usr/lib/cni/host-local"

// hostLocal runs the real host-local binary the way a runtime runs an IPAM
// plugin. It needs no namespace: host-local only touches its data dir.
func hostLocal(t *testing.T, cmd, dir, ranges, id, ifName string) []string {
	t.Helper()
	nettest.RequireSysfs(t, debianHostLocal) // gates like a tool: CI installs containernetworking-plugins
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"net","ipam":{"type":"host-local","dataDir":%q,"ranges":%s}}`, dir, ranges)
	c := exec.Command(debianHostLocal)
	c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_IFNAME=" + ifName,
		"CNI_NETNS=/nonexistent", "CNI_PATH=/usr/lib/cni"}
	c.Stdin = strings.NewReader(conf)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("host-local %s %s: %v\n%s%s", cmd, id, err, out, stderr.Bytes())
	}
	if cmd != "ADD" {
		return nil
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("host-local result %s: %v", out, err)
	}
	var ips []string
	for _, ip := range res.IPs {
		ips = append(ips, ip.Address)
	}
	return ips
}

// TestCompatibleWithHostLocal interleaves the real host-local and this
// package on one directory: each honours the other's reservations and
// round-robin cursor and can release the other's allocations.
func TestCompatibleWithHostLocal(t *testing.T) {
	dir := t.TempDir()
	const ranges = `[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]]`
	sets := mustSets(t, ranges)

	// host-local writes, we read.
	if got := strings.Join(hostLocal(t, "ADD", dir, ranges, "hl-a", "eth0"), ","); got != "10.244.1.2/24,fd00:10:244:1::2/64" {
		t.Fatalf("host-local first allocation %s", got)
	}
	hostLocal(t, "ADD", dir, ranges, "hl-b", "eth0")
	s := openStore(t, dir)
	ips, err := s.Lookup("hl-a", "eth0")
	if err != nil || len(ips) != 2 || ips[0].String() != "10.244.1.2" && ips[1].String() != "10.244.1.2" {
		t.Fatalf("lookup of host-local's allocation: %v %v", ips, err)
	}
	// Our allocation continues host-local's cursor and skips its addresses.
	if got := addrs(alloc(t, s, sets, "nn-c")); got != "10.244.1.4/24,fd00:10:244:1::4/64" {
		t.Fatalf("our allocation after host-local: %s", got)
	}
	// We write, host-local reads: it continues from our cursor.
	if got := strings.Join(hostLocal(t, "ADD", dir, ranges, "hl-d", "eth0"), ","); got != "10.244.1.5/24,fd00:10:244:1::5/64" {
		t.Fatalf("host-local after ours: %s", got)
	}
	// A requested address held by host-local is refused.
	if _, err := s.Allocate(Request{ContainerID: "x", IfName: "eth0", RangeSets: sets, IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}); err == nil {
		t.Fatal("we handed out an address host-local holds")
	}
	// Each side releases the other's allocations.
	hostLocal(t, "DEL", dir, ranges, "nn-c", "eth0")
	if ips, _ := s.Lookup("nn-c", "eth0"); len(ips) != 0 {
		t.Fatalf("host-local DEL left our reservation: %v", ips)
	}
	if ips, err := s.Release("hl-a", "eth0"); err != nil || len(ips) != 2 {
		t.Fatalf("releasing host-local's allocation: %v %v", ips, err)
	}
	// host-local's DEL is idempotent on what we already released, and the
	// file format is what host-local itself writes.
	hostLocal(t, "DEL", dir, ranges, "hl-a", "eth0")
	data, err := os.ReadFile(s.Dir() + "/10.244.1.5")
	if err != nil || string(data) != "hl-d\r\neth0" {
		t.Fatalf("host-local's file: %q %v", data, err)
	}
	alloc(t, s, sets, "nn-e")
	ours, err := os.ReadFile(s.Dir() + "/10.244.1.6")
	if err != nil || string(ours) != "nn-e\r\neth0" {
		t.Fatalf("our file: %q %v", ours, err)
	}
	for _, id := range []string{"hl-b", "hl-d", "nn-e"} {
		hostLocal(t, "DEL", dir, ranges, id, "eth0")
	}
	if res, err := s.Reservations(); err != nil || len(res) != 0 {
		t.Fatalf("store not empty: %v %v", res, err)
	}
}
