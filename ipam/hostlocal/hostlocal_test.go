package hostlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func mustSets(t *testing.T, js string) []RangeSet {
	t.Helper()
	var sets []RangeSet
	if err := json.Unmarshal([]byte(js), &sets); err != nil {
		t.Fatal(err)
	}
	for i, s := range sets {
		c, err := s.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		sets[i] = c
	}
	return sets
}

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, "net")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func alloc(t *testing.T, s *Store, sets []RangeSet, id string, ips ...string) []Allocation {
	t.Helper()
	req := Request{ContainerID: id, IfName: "eth0", RangeSets: sets}
	for _, ip := range ips {
		req.IPs = append(req.IPs, netip.MustParseAddr(ip))
	}
	a, err := s.Allocate(req)
	if err != nil {
		t.Fatalf("allocate %s: %v", id, err)
	}
	return a
}

func addrs(as []Allocation) string {
	var out []string
	for _, a := range as {
		out = append(out, a.Address.String())
	}
	return strings.Join(out, ",")
}

func TestRangeCanonical(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: `{"subnet":"10.244.1.0/24"}`, want: `10.244.1.1-10.244.1.254 gw 10.244.1.1`},
		{in: `{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.10","rangeEnd":"10.244.1.20","gateway":"10.244.1.254"}`, want: `10.244.1.10-10.244.1.20 gw 10.244.1.254`},
		{in: `{"subnet":"fd00:1::/64"}`, want: `fd00:1::1-fd00:1::ffff:ffff:ffff:ffff gw fd00:1::1`},
		{in: `{"subnet":"10.244.1.1/24"}`, err: "host bits"},
		{in: `{"subnet":"10.244.1.0/31"}`, err: "too small"},
		{in: `{"subnet":"10.244.1.0/24","gateway":"10.9.9.9"}`, err: "gateway"},
		{in: `{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.20","rangeEnd":"10.244.1.10"}`, err: "after"},
		{in: `{"subnet":"10.244.1.0/24","rangeEnd":"fd00::1"}`, err: "rangeEnd"},
		{in: `{"subnet":"banana"}`, err: "not a CIDR"},
		{in: `{}`, err: "subnet is missing"},
	} {
		var r Range
		err := json.Unmarshal([]byte(tc.in), &r)
		if err == nil {
			r, err = r.Canonical()
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: got %v, want error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := fmt.Sprintf("%s gw %s", r, r.Gateway); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
	if _, err := (RangeSet{{Subnet: netip.MustParsePrefix("10.0.0.0/24")}, {Subnet: netip.MustParsePrefix("10.0.0.0/25")}}).Canonical(); err == nil {
		t.Error("overlapping ranges accepted")
	}
	if _, err := (RangeSet{{Subnet: netip.MustParsePrefix("10.0.0.0/24")}, {Subnet: netip.MustParsePrefix("fd00::/64")}}).Canonical(); err == nil {
		t.Error("mixed families accepted")
	}
}

func TestAllocateRoundRobinAndRelease(t *testing.T) {
	s := openStore(t, t.TempDir())
	sets := mustSets(t, `[[{"subnet":"10.244.1.0/29"}]]`) // .1 gateway, .2-.6 usable
	var got []string
	for i := range 5 {
		got = append(got, addrs(alloc(t, s, sets, fmt.Sprintf("c%d", i))))
	}
	if want := "10.244.1.2/29 10.244.1.3/29 10.244.1.4/29 10.244.1.5/29 10.244.1.6/29"; strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
	if _, err := s.Allocate(Request{ContainerID: "full", IfName: "eth0", RangeSets: sets}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("full range: %v, want ErrExhausted", err)
	}
	if ips, err := s.Release("c1", "eth0"); err != nil || len(ips) != 1 || ips[0].String() != "10.244.1.3" {
		t.Fatalf("release c1: %v %v", ips, err)
	}
	if ips, err := s.Release("c1", "eth0"); err != nil || len(ips) != 0 {
		t.Fatalf("second release c1: %v %v", ips, err)
	}
	// The cursor is at .6, so the next address wraps around to the free .3.
	if got := addrs(alloc(t, s, sets, "c5")); got != "10.244.1.3/29" {
		t.Fatalf("after wrap: %s", got)
	}
	res, err := s.Reservations()
	if err != nil || len(res) != 5 {
		t.Fatalf("reservations %v %v", res, err)
	}
}

func TestAllocateDualStackMultiRangeRequested(t *testing.T) {
	s := openStore(t, t.TempDir())
	sets := mustSets(t, `[
		[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.11"},{"subnet":"10.2.0.0/24","rangeStart":"10.2.0.10","rangeEnd":"10.2.0.10"}],
		[{"subnet":"fd00:5::/64"}]]`)
	var got []string
	for i := range 3 {
		got = append(got, addrs(alloc(t, s, sets, fmt.Sprintf("c%d", i))))
	}
	want := []string{"10.1.0.10/24,fd00:5::2/64", "10.1.0.11/24,fd00:5::3/64", "10.2.0.10/24,fd00:5::4/64"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := s.Allocate(Request{ContainerID: "x", IfName: "eth0", RangeSets: sets}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("v4 set should be exhausted: %v", err)
	}
	if res, _ := s.Reservations(); len(res) != 6 {
		t.Fatalf("an exhausted allocation kept its v6 address: %v", res)
	}
	// Requested addresses.
	s2 := openStore(t, t.TempDir())
	if got := addrs(alloc(t, s2, sets, "r", "fd00:5::99")); got != "10.1.0.10/24,fd00:5::99/64" {
		t.Fatalf("requested v6: %s", got)
	}
	for _, tc := range []struct {
		ips  []string
		want error
	}{
		{[]string{"fd00:5::99"}, ErrInUse},
		{[]string{"10.9.9.9"}, ErrNotInRange},
		{[]string{"fd00:5::1"}, ErrNotInRange},
		{[]string{"fd00:5::7", "fd00:5::8"}, ErrNotInRange},
	} {
		req := Request{ContainerID: "other", IfName: "eth0", RangeSets: sets}
		for _, ip := range tc.ips {
			req.IPs = append(req.IPs, netip.MustParseAddr(ip))
		}
		if _, err := s2.Allocate(req); !errors.Is(err, tc.want) {
			t.Errorf("request %v: %v, want %v", tc.ips, err, tc.want)
		}
	}
	// Failed requests leave nothing behind.
	if res, _ := s2.Reservations(); len(res) != 2 {
		t.Fatalf("after failures: %v", res)
	}
}

func TestAllocateReusesAttachmentAddress(t *testing.T) {
	s := openStore(t, t.TempDir())
	sets := mustSets(t, `[[{"subnet":"10.244.1.0/24"}]]`)
	first := addrs(alloc(t, s, sets, "c"))
	if again := addrs(alloc(t, s, sets, "c")); again != first {
		t.Fatalf("retried ADD got %s, first %s", again, first)
	}
	if res, _ := s.Reservations(); len(res) != 1 {
		t.Fatalf("reservations %v", res)
	}
}

func TestGC(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	sets := mustSets(t, `[[{"subnet":"10.244.1.0/24"}]]`)
	for _, id := range []string{"a", "b", "c"} {
		alloc(t, s, sets, id)
	}
	// A host-local <0.7 file (container ID only), an empty file left by a
	// crash between create and write, and foreign files that must survive.
	for name, content := range map[string]string{"10.244.1.50": "legacy\n", "10.244.1.51": "", "10.244.1.52": "gone", "notes.txt": "x"} {
		if err := os.WriteFile(filepath.Join(s.Dir(), name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := s.GC([]Attachment{{"a", "eth0"}, {"legacy", "eth0"}, {"c", "net1"}})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, r := range removed {
		ips = append(ips, r.IP.String())
	}
	slices.Sort(ips)
	if want := []string{"10.244.1.3", "10.244.1.4", "10.244.1.51", "10.244.1.52"}; !slices.Equal(ips, want) {
		t.Fatalf("GC removed %v, want %v", ips, want)
	}
	for _, keep := range []string{"10.244.1.2", "10.244.1.50", "notes.txt", "lock", "last_reserved_ip.0"} {
		if _, err := os.Stat(filepath.Join(s.Dir(), keep)); err != nil {
			t.Errorf("GC removed %s: %v", keep, err)
		}
	}
}

// TestParallelAllocate: separate Stores (separate lock fds, as separate
// processes have) never hand out one address twice.
func TestParallelAllocate(t *testing.T) {
	dir := t.TempDir()
	sets := mustSets(t, `[[{"subnet":"10.244.0.0/23"}]]`)
	const n = 200
	got := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			s, err := Open(dir, "net")
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			a, err := s.Allocate(Request{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", RangeSets: sets})
			if err != nil {
				errs <- err
				return
			}
			got[i] = a[0].Address.String()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range got {
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
	s := openStore(t, dir)
	for i := range n {
		if _, err := s.Release(fmt.Sprintf("c%d", i), "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := s.Reservations(); err != nil || len(res) != 0 {
		t.Fatalf("store not empty after releasing everything: %v %v", res, err)
	}
}

func TestOpenRejectsPathNames(t *testing.T) {
	for _, name := range []string{"", "..", "a/b"} {
		if _, err := Open(t.TempDir(), name); err == nil {
			t.Errorf("Open accepted network name %q", name)
		}
	}
}

// TestReleasedFilesAreRecycled: a release keeps the file as a spare and
// the next reservation renames it into place instead of allocating an
// inode; spares are capped and invisible as reservations.
func TestReleasedFilesAreRecycled(t *testing.T) {
	s := openStore(t, t.TempDir())
	sets := mustSets(t, `[[{"subnet":"10.244.0.0/22"}]]`)
	alloc(t, s, sets, "a")
	ino := func(name string) uint64 {
		fi, err := os.Stat(filepath.Join(s.Dir(), name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	first := ino("10.244.0.2")
	if _, err := s.Release("a", "eth0"); err != nil {
		t.Fatal(err)
	}
	if got := addrs(alloc(t, s, sets, "b")); got != "10.244.0.3/22" {
		t.Fatalf("next allocation %s", got)
	}
	if ino("10.244.0.3") != first {
		t.Error("the released file was not reused")
	}
	if data, _ := os.ReadFile(filepath.Join(s.Dir(), "10.244.0.3")); string(data) != "b\r\neth0" {
		t.Errorf("recycled file holds %q", data)
	}
	for i := range 100 {
		alloc(t, s, sets, fmt.Sprintf("c%d", i))
	}
	for i := range 100 {
		s.Release(fmt.Sprintf("c%d", i), "eth0")
	}
	entries, _ := os.ReadDir(s.Dir())
	spares := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			spares++
		}
	}
	if spares != maxSpares {
		t.Errorf("%d spares, want the cap %d", spares, maxSpares)
	}
	if res, _ := s.Reservations(); len(res) != 1 {
		t.Errorf("reservations %v", res)
	}
}
