package hostlocal

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRangeJSON holds the range decoder (a CNI config's "ranges" entries,
// outside input) to two properties: it never panics, and a range it accepts
// and canonicalises survives a marshal/unmarshal round trip unchanged.
func FuzzRangeJSON(f *testing.F) {
	for _, s := range []string{
		`{"subnet":"10.244.1.0/24"}`,
		`{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.10","rangeEnd":"10.244.1.20","gateway":"10.244.1.1"}`,
		`{"subnet":"fd00::/64","gateway":"fd00::1"}`,
		`{"subnet":"10.244.1.0/31"}`,
		`{"subnet":"10.244.1.5/24","rangeStart":"10.244.2.1"}`,
		`{"subnet":"::ffff:10.0.0.0/120"}`,
		`{"subnet":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Range
		if err := json.Unmarshal(data, &r); err != nil {
			return
		}
		c, err := r.Canonical()
		if err != nil {
			return
		}
		if !c.Contains(c.RangeStart) || !c.Contains(c.RangeEnd) {
			t.Fatalf("canonical range %s does not contain its own bounds", c)
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal canonical %s: %v", c, err)
		}
		var back Range
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("unmarshal own output %s: %v", out, err)
		}
		if back != c {
			t.Fatalf("round trip changed the range: %+v -> %s -> %+v", c, out, back)
		}
	})
}

// FuzzStoreFiles plants arbitrary content in a store directory — a
// reservation file of any name and content and a last_reserved_ip file —
// as a crash, another tool or a damaged disk could leave it, and holds the
// allocator to its contract: no panic, and an address it hands out is in
// the range, is not the gateway and was not reserved by anyone else.
func FuzzStoreFiles(f *testing.F) {
	f.Add("10.244.1.5", []byte("c1\neth0"), []byte("10.244.1.9"))
	f.Add("10.244.1.2", []byte("  \n\n"), []byte("garbage"))
	f.Add("10.244.1.254", []byte("other\r\neth0"), []byte("10.244.1.254"))
	f.Add("fe80::1%eth0", []byte("x"), []byte("::1"))
	f.Add("last_reserved_ip.0", []byte("10.244.1.1"), []byte(""))
	f.Add("..", []byte(""), []byte("10.244.2.7"))
	f.Fuzz(func(t *testing.T, name string, content, last []byte) {
		if name == "" || filepath.Base(name) != name || name == "." || name == ".." {
			return
		}
		dir := t.TempDir()
		s, err := Open(dir, "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := os.WriteFile(filepath.Join(s.Dir(), name), content, 0o644); err != nil {
			return // a name the file system refuses
		}
		if err := os.WriteFile(filepath.Join(s.Dir(), lastReservedPrefix+"0"), last, 0o644); err != nil {
			t.Fatal(err)
		}
		set, err := RangeSet{{Subnet: netip.MustParsePrefix("10.244.1.0/28")}}.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		before, err := s.Reservations()
		if err != nil {
			t.Fatalf("Reservations: %v", err)
		}
		owner := map[netip.Addr]Reservation{}
		for _, r := range before {
			owner[r.IP] = r
		}
		got, err := s.Allocate(Request{ContainerID: "fuzz-container", IfName: "eth0", RangeSets: []RangeSet{set}})
		if err != nil {
			return // exhausted or refused: allowed, as long as nothing panicked
		}
		if len(got) != 1 {
			t.Fatalf("Allocate returned %d allocations for one range set", len(got))
		}
		a := got[0].Address.Addr()
		if _, ok := set.Contains(a); !ok || a == got[0].Gateway {
			t.Fatalf("allocated %s outside %s or the gateway %s", a, set, got[0].Gateway)
		}
		if r, ok := owner[a]; ok && !r.Owns("fuzz-container", "eth0") {
			t.Fatalf("allocated %s, already reserved by %q/%q", a, r.ContainerID, r.IfName)
		}
	})
}
