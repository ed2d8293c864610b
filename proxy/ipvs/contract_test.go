package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ipvs/vmtest"
)

// vmModules are loaded in the VM before the tests start (the rest is
// autoloaded).
var vmModules = []string{"xfrm_user", "ip_vs", "ip_vs_rr", "ip_vs_sh", "ip_vs_mh", "ip_vs_lc", "dummy", "veth", "nf_tables", "nf_conntrack"}

// TestInVM runs this package's quick kernel tests inside a VM booted from
// Debian's kernel, which has IPVS (this machine's has not): the handle's
// contract and traffic through the proxier.
func TestInVM(t *testing.T) {
	vmtest.RunPackage(t, "^TestKernel(Contract|Traffic|PartialSyncRequests)$", vmModules...)
}

// TestInVMSuite runs the shared real-kernel suite (which starts an API
// server inside the VM: about a minute under TCG) in the VM, case for
// case; -short skips it.
func TestInVMSuite(t *testing.T) {
	nettest.SkipShort(t, "the ipvs real-kernel suite in a VM")
	vmtest.RunPackage(t, "^TestKernelSuite$", vmModules...)
}

// requireGuest runs kernel tests only inside the VM (TestInVM), where
// IPVS exists.
func requireGuest(t *testing.T) {
	t.Helper()
	if !vmtest.InGuest() {
		t.Skip("needs IPVS: runs inside the VM (TestInVM)")
	}
}

// TestNoIPVSIsAClearError: on a kernel without IPVS (this machine's),
// opening the table fails and says what is missing.
func TestNoIPVSIsAClearError(t *testing.T) {
	if _, err := os.Stat(ProcIPVS); err == nil {
		t.Skip("this kernel has IPVS")
	}
	h, err := Open("")
	if err == nil {
		h.Close()
		t.Fatal("Open succeeded on a kernel without IPVS")
	}
	if !errors.Is(err, ErrNoIPVS) {
		t.Fatalf("got %v, want ErrNoIPVS", err)
	}
}

func TestFakeContract(t *testing.T) { contract(t, NewFake()) }

// TestKernelContract holds the kernel to the same steps as the fake.
func TestKernelContract(t *testing.T) {
	requireGuest(t)
	ns := nettest.New(t)
	h, err := Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	contract(t, h)
}

// contract is what the proxier relies on: the same steps give the same
// results (and the same errnos) on the kernel and on the fake.
func contract(t *testing.T, h Handle) {
	t.Helper()
	vip := netip.MustParseAddr("10.96.0.10")
	vip6 := netip.MustParseAddr("fd00::10")
	tcp := Service{Addr: vip, Port: 80, Protocol: proxy.TCP, Scheduler: "rr"}
	udp := Service{Addr: vip, Port: 53, Protocol: proxy.UDP, Scheduler: "rr", Flags: FlagPersistent, Timeout: 10800 * time.Second}
	sctp6 := Service{Addr: vip6, Port: 9999, Protocol: proxy.SCTP, Scheduler: "mh", Flags: FlagSched1 | FlagSched2}
	d1 := Destination{Addr: netip.MustParseAddr("10.244.1.2"), Port: 8080, Weight: 1}
	d2 := Destination{Addr: netip.MustParseAddr("10.244.2.2"), Port: 8080, Weight: 1}
	d6 := Destination{Addr: netip.MustParseAddr("fd10::2"), Port: 9999, Weight: 1}
	step := func(what string, err error, want error) {
		t.Helper()
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("%s: got %v, want %v", what, err, want)
		}
	}
	for _, s := range []Service{tcp, udp, sctp6} {
		step("add "+s.String(), h.AddService(s), nil)
	}
	step("add again", h.AddService(tcp), unix.EEXIST)
	step("unknown scheduler", h.AddService(Service{Addr: vip, Port: 81, Protocol: proxy.TCP, Scheduler: "nope"}), unix.ENOENT)
	step("update missing", h.UpdateService(Service{Addr: vip, Port: 82, Protocol: proxy.TCP, Scheduler: "rr"}), unix.ESRCH)
	step("delete missing", h.DeleteService(ServiceKey{Addr: vip, Port: 82, Protocol: proxy.TCP}), unix.ESRCH)
	tcp.Scheduler, tcp.Flags, tcp.Timeout = "sh", FlagPersistent, 30*time.Second
	step("update", h.UpdateService(tcp), nil)
	want := []Service{sctp6, tcp, udp}
	SortServices(want)
	got, err := h.Services()
	step("list", err, nil)
	SortServices(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("services:\n got %+v\nwant %+v", got, want)
	}

	step("add d1", h.AddDestination(tcp.Key(), d1), nil)
	step("add d2", h.AddDestination(tcp.Key(), d2), nil)
	step("add d6", h.AddDestination(sctp6.Key(), d6), nil)
	step("add d1 again", h.AddDestination(tcp.Key(), d1), unix.EEXIST)
	step("add to missing", h.AddDestination(ServiceKey{Addr: vip, Port: 82, Protocol: proxy.TCP}, d1), unix.ESRCH)
	if err := h.AddDestination(tcp.Key(), d6); err == nil {
		t.Fatal("an IPv6 destination of an IPv4 service was accepted")
	}
	d2.Weight = 0
	step("drain d2", h.UpdateDestination(tcp.Key(), d2), nil)
	step("update missing dest", h.UpdateDestination(udp.Key(), d1), unix.ENOENT)
	dests, err := h.Destinations(tcp.Key())
	step("list dests", err, nil)
	SortDestinations(dests)
	if !reflect.DeepEqual(dests, []Destination{d1, d2}) {
		t.Fatalf("destinations: got %+v, want %+v", dests, []Destination{d1, d2})
	}
	dests, err = h.Destinations(sctp6.Key())
	step("list dests v6", err, nil)
	if !reflect.DeepEqual(dests, []Destination{d6}) {
		t.Fatalf("destinations: got %+v, want %+v", dests, []Destination{d6})
	}
	dests, err = h.Destinations(ServiceKey{Addr: vip, Port: 82, Protocol: proxy.TCP})
	if err != nil || len(dests) != 0 {
		t.Fatalf("destinations of a missing service: %v %v", dests, err)
	}
	step("delete d1", h.DeleteDestination(tcp.Key(), d1.Key()), nil)
	step("delete d1 again", h.DeleteDestination(tcp.Key(), d1.Key()), unix.ENOENT)
	if got, ok, err := h.Service(tcp.Key()); err != nil || !ok || got != tcp {
		t.Fatalf("read %s: got %+v %v %v, want %+v", tcp, got, ok, err, tcp)
	}
	if _, ok, err := h.Service(ServiceKey{Addr: vip, Port: 82, Protocol: proxy.TCP}); err != nil || ok {
		t.Fatalf("read a missing service: %v %v", ok, err)
	}
	step("delete service with a destination", h.DeleteService(tcp.Key()), nil)
	step("delete dest of deleted", h.DeleteDestination(tcp.Key(), d2.Key()), unix.ESRCH)

	old, err := h.Timeouts()
	step("timeouts", err, nil)
	set := Timeouts{TCP: 600 * time.Second, UDP: 30 * time.Second}
	step("set timeouts", h.SetTimeouts(set), nil)
	now, err := h.Timeouts()
	step("timeouts", err, nil)
	if w := (Timeouts{TCP: set.TCP, TCPFin: old.TCPFin, UDP: set.UDP}); now != w {
		t.Fatalf("timeouts: got %+v, want %+v (zero leaves a timeout unchanged)", now, w)
	}
	if err := h.SetTimeouts(Timeouts{TCP: 1500 * time.Millisecond}); err == nil {
		t.Fatal("a fractional timeout was accepted")
	}
	// Apply: many writes in order (a service, then its real servers);
	// deleting what is gone counts as done; a failed write is reported
	// and the writes after it are still made.
	batch := Service{Addr: vip, Port: 8443, Protocol: proxy.TCP, Scheduler: "rr"}
	gone := Destination{Addr: netip.MustParseAddr("10.244.9.9"), Port: 1, Weight: 1}
	step("apply", h.Apply([]Op{
		{Kind: OpAddService, Svc: batch},
		{Kind: OpAddDestination, Svc: batch, Dest: d1},
		{Kind: OpAddDestination, Svc: batch, Dest: d2},
		{Kind: OpDeleteDestination, Svc: batch, Dest: gone},
		{Kind: OpDeleteService, Svc: Service{Addr: vip, Port: 82, Protocol: proxy.TCP}},
	}), nil)
	d1.Weight = 0
	step("apply with a failure", h.Apply([]Op{
		{Kind: OpAddDestination, Svc: batch, Dest: d2},
		{Kind: OpUpdateDestination, Svc: batch, Dest: d1},
	}), unix.EEXIST)
	dests, err = h.Destinations(batch.Key())
	step("list applied dests", err, nil)
	SortDestinations(dests)
	if !reflect.DeepEqual(dests, []Destination{d1, d2}) {
		t.Fatalf("after apply: got %+v, want %+v", dests, []Destination{d1, d2})
	}
	step("apply delete", h.Apply([]Op{{Kind: OpDeleteService, Svc: batch}}), nil)
	for _, s := range []Service{udp, sctp6} {
		step(fmt.Sprint("delete ", s), h.DeleteService(s.Key()), nil)
	}
	if got, err := h.Services(); err != nil || len(got) != 0 {
		t.Fatalf("after deleting all: %v %v", got, err)
	}
}
