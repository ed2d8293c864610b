package routes

import (
	"errors"
	"strings"
	"testing"
)

func newFakeEnv(t *testing.T) *contractEnv {
	f, err := NewFake(0, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	return &contractEnv{
		table: f,
		id:    MainTable,
		proto: ProtocolNodenet,
		dev:   "eth0",
		addForeign: func(t *testing.T, r Route) {
			if err := f.AddForeign(r); err != nil {
				t.Fatal(err)
			}
		},
		all: func(*testing.T) []Route { return f.All() },
	}
}

func TestFakeContract(t *testing.T) { testTableContract(t, newFakeEnv) }

func TestFakeDumpAndDeleteOwned(t *testing.T) {
	f, err := NewFake(100, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, f.Add(t.Context(), Route{Dst: pfx("10.244.2.0/24"), Gw: ip("192.168.50.12")}))
	mustOK(t, f.Add(t.Context(), Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11"), Dev: "eth0"}))
	mustOK(t, f.AddForeign(Route{Dst: pfx("10.0.0.0/8"), Dev: "eth0"}))
	want := strings.Join([]string{
		"10.0.0.0/8 dev eth0 proto 4 table 100",
		"10.244.1.0/24 via 192.168.50.11 dev eth0 proto 78 table 100",
		"10.244.2.0/24 via 192.168.50.12 proto 78 table 100",
	}, "\n")
	if got := f.Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	if f.DeleteOwned(Route{Dst: pfx("10.0.0.0/8"), Dev: "eth0"}) {
		t.Error("DeleteOwned removed a foreign route")
	}
	if !f.DeleteOwned(Route{Dst: pfx("10.244.2.0/24"), Gw: ip("192.168.50.12")}) {
		t.Error("DeleteOwned did not remove an owned route")
	}
	if err := f.AddForeign(Route{Dst: pfx("10.244.1.0/24"), Dev: "eth0"}); err == nil {
		t.Error("AddForeign over an owned route succeeded")
	}
	if err := f.AddForeign(Route{Dst: pfx("10.1.0.0/16"), Dev: "eth0", Protocol: ProtocolNodenet}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddForeign with the owned protocol: %v", err)
	}
}

func TestNewOwnerValidation(t *testing.T) {
	for _, tc := range []struct {
		table int
		proto int
		ok    bool
	}{
		{0, int(ProtocolNodenet), true},
		{100, int(ProtocolNodenet), true},
		{1 << 20, 200, true},
		{0, 0, false},   // unspec would match every route
		{0, 2, false},   // kernel
		{0, 4, false},   // static: an administrator's
		{0, 256, false}, // does not fit rtm_protocol
		{255, int(ProtocolNodenet), false},
		{-1, int(ProtocolNodenet), false},
	} {
		_, err := NewFake(tc.table, netlinkProto(tc.proto))
		if (err == nil) != tc.ok {
			t.Errorf("NewFake(%d, %d): err %v, want ok=%v", tc.table, tc.proto, err, tc.ok)
		}
	}
}
