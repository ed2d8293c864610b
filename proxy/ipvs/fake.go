package ipvs

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Schedulers are the IPVS schedulers a Debian kernel ships (ip_vs_<name>
// modules); the fake knows these, as the kernel knows those it can load.
var Schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh"}

// DefaultTimeouts are the kernel's IPVS timeouts before anyone sets them.
var DefaultTimeouts = Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}

// Fake is a stateful in-memory Handle that answers like the kernel (same
// errnos for the same mistakes), held to that by the contract test. It is
// safe for concurrent use. Conns lets tests stand in for traffic: the
// active/inactive counts a destination reports.
type Fake struct {
	mu       sync.Mutex
	services map[ServiceKey]*fakeService
	timeouts Timeouts
	// Calls counts the writes (add/update/delete), for tests that check a
	// sync wrote nothing.
	Calls int
	// Requests counts what the kernel would see as requests: each
	// single write, each Apply (one per 256 writes, as Netlink), each
	// read and each dump; Dumps the listings of every service.
	Requests, Dumps int
	// FailAt, when set, picks writes of Apply that fail (tests of
	// recovery from a failed sync).
	FailAt func(Op) bool
}

type fakeService struct {
	svc   Service
	dests map[netip.AddrPort]Destination
}

// NewFake returns an empty table with the kernel's default timeouts.
func NewFake() *Fake {
	return &Fake{services: map[ServiceKey]*fakeService{}, timeouts: DefaultTimeouts}
}

func knownScheduler(s string) bool { return slices.Contains(Schedulers, s) }

func (f *Fake) setService(s Service, add bool) error {
	if err := s.validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls++
	cur, ok := f.services[s.Key()]
	op := "update"
	if add {
		op = "add"
	}
	switch {
	case add && ok:
		return fmt.Errorf("%s ipvs service %s: %w", op, s, unix.EEXIST)
	case !add && !ok:
		return fmt.Errorf("%s ipvs service %s: %w", op, s, unix.ESRCH)
	case !knownScheduler(s.Scheduler):
		return fmt.Errorf("%s ipvs service %s: %w", op, s, unix.ENOENT)
	}
	s.Timeout = s.Timeout.Truncate(time.Second)
	if add {
		f.services[s.Key()] = &fakeService{svc: s, dests: map[netip.AddrPort]Destination{}}
	} else {
		cur.svc = s
	}
	return nil
}

// AddService implements Handle.
func (f *Fake) AddService(s Service) error { f.request(); return f.setService(s, true) }

// request counts one request.
func (f *Fake) request() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Requests++
}

// UpdateService implements Handle.
func (f *Fake) UpdateService(s Service) error { f.request(); return f.setService(s, false) }

// DeleteService implements Handle.
func (f *Fake) DeleteService(k ServiceKey) error {
	f.request()
	return f.deleteService(k)
}

func (f *Fake) deleteService(k ServiceKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls++
	if _, ok := f.services[k]; !ok {
		return fmt.Errorf("delete ipvs service %s: %w", k, unix.ESRCH)
	}
	delete(f.services, k)
	return nil
}

// Services implements Handle, sorted.
func (f *Fake) Services() ([]Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Requests++
	f.Dumps++
	out := make([]Service, 0, len(f.services))
	for _, s := range f.services {
		out = append(out, s.svc)
	}
	SortServices(out)
	return out, nil
}

func (f *Fake) setDest(k ServiceKey, d Destination, add bool) error {
	if err := d.validate(k); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls++
	s, ok := f.services[k]
	if !ok {
		return fmt.Errorf("set ipvs destination %s of %s: %w", d.Key(), k, unix.ESRCH)
	}
	cur, exists := s.dests[d.Key()]
	switch {
	case add && exists:
		return fmt.Errorf("add ipvs destination %s to %s: %w", d.Key(), k, unix.EEXIST)
	case !add && !exists:
		return fmt.Errorf("update ipvs destination %s of %s: %w", d.Key(), k, unix.ENOENT)
	}
	d.ActiveConns, d.InactiveConns = cur.ActiveConns, cur.InactiveConns
	s.dests[d.Key()] = d
	return nil
}

// AddDestination implements Handle.
func (f *Fake) AddDestination(k ServiceKey, d Destination) error {
	f.request()
	return f.setDest(k, d, true)
}

// UpdateDestination implements Handle.
func (f *Fake) UpdateDestination(k ServiceKey, d Destination) error {
	f.request()
	return f.setDest(k, d, false)
}

// DeleteDestination implements Handle.
func (f *Fake) DeleteDestination(k ServiceKey, ap netip.AddrPort) error {
	f.request()
	return f.deleteDestination(k, ap)
}

func (f *Fake) deleteDestination(k ServiceKey, ap netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls++
	s, ok := f.services[k]
	if !ok {
		return fmt.Errorf("delete ipvs destination %s of %s: %w", ap, k, unix.ESRCH)
	}
	if _, ok := s.dests[ap]; !ok {
		return fmt.Errorf("delete ipvs destination %s of %s: %w", ap, k, unix.ENOENT)
	}
	delete(s.dests, ap)
	return nil
}

// Destinations implements Handle, sorted; a missing service lists none,
// as the kernel's dump does.
func (f *Fake) Destinations(k ServiceKey) ([]Destination, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Requests++
	s, ok := f.services[k]
	if !ok {
		return nil, nil
	}
	out := make([]Destination, 0, len(s.dests))
	for _, d := range s.dests {
		out = append(out, d)
	}
	SortDestinations(out)
	return out, nil
}

// Service implements Handle.
func (f *Fake) Service(k ServiceKey) (Service, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Requests++
	s, ok := f.services[k]
	if !ok {
		return Service{}, false, nil
	}
	return s.svc, true, nil
}

// Apply implements Handle: each op as its method would, going on past a
// failure (so does the kernel within a request); deleting what is gone
// counts as done. FailAt, when set, makes the write it matches fail
// with EIO instead (a kernel that ran out of memory, say).
func (f *Fake) Apply(ops []Op) error {
	var first error
	for i, op := range ops {
		if i%256 == 0 {
			f.request()
		}
		f.mu.Lock()
		fail := f.FailAt != nil && f.FailAt(op)
		f.mu.Unlock()
		var err error
		k := op.Svc.Key()
		switch {
		case fail:
			err = fmt.Errorf("%s: %w", op, unix.EIO)
		case op.Kind == OpAddService:
			err = f.setService(op.Svc, true)
		case op.Kind == OpUpdateService:
			err = f.setService(op.Svc, false)
		case op.Kind == OpDeleteService:
			if err = f.deleteService(k); errors.Is(err, unix.ESRCH) {
				err = nil
			}
		case op.Kind == OpAddDestination:
			err = f.setDest(k, op.Dest, true)
		case op.Kind == OpUpdateDestination:
			err = f.setDest(k, op.Dest, false)
		case op.Kind == OpDeleteDestination:
			if err = f.deleteDestination(k, op.Dest.Key()); errors.Is(err, unix.ENOENT) {
				err = nil
			}
		default:
			err = op.validate()
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// SetConns sets the connection counts a destination reports (what
// traffic would do), for graceful-termination tests.
func (f *Fake) SetConns(k ServiceKey, ap netip.AddrPort, active, inactive uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.services[k]; ok {
		if d, ok := s.dests[ap]; ok {
			d.ActiveConns, d.InactiveConns = active, inactive
			s.dests[ap] = d
		}
	}
}

// Timeouts implements Handle.
func (f *Fake) Timeouts() (Timeouts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.timeouts, nil
}

// SetTimeouts implements Handle.
func (f *Fake) SetTimeouts(t Timeouts) error {
	for _, v := range []time.Duration{t.TCP, t.TCPFin, t.UDP} {
		if v < 0 || v%time.Second != 0 {
			return fmt.Errorf("set ipvs timeouts: %v is not a whole, non-negative number of seconds", v)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls++
	for _, p := range []struct {
		dst *time.Duration
		v   time.Duration
	}{{&f.timeouts.TCP, t.TCP}, {&f.timeouts.TCPFin, t.TCPFin}, {&f.timeouts.UDP, t.UDP}} {
		if p.v != 0 {
			*p.dst = p.v
		}
	}
	return nil
}

// Close implements Handle.
func (f *Fake) Close() error { return nil }

// SortServices orders services by protocol, address and port.
func SortServices(s []Service) {
	slices.SortFunc(s, func(a, b Service) int { return compareKeys(a.Key(), b.Key()) })
}

func compareKeys(a, b ServiceKey) int {
	return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
}

// SortDestinations orders destinations by address and port.
func SortDestinations(d []Destination) {
	slices.SortFunc(d, func(a, b Destination) int { return a.Key().Compare(b.Key()) })
}

var _ Handle = (*Fake)(nil)
