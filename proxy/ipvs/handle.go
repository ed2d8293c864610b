package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/nodenet/nodenet/proxy"
)

// Service is an IPVS virtual server: the kernel's key is (family,
// protocol, address, port).
type Service struct {
	Addr     netip.Addr
	Port     uint16
	Protocol proxy.Protocol
	// Scheduler is the IPVS scheduler ("rr", "lc", "sh", "mh"...).
	Scheduler string
	// Flags are IP_VS_SVC_F_* bits (FlagPersistent, FlagSched1...).
	Flags uint32
	// Timeout is the persistence timeout (with FlagPersistent).
	Timeout time.Duration
}

// IPVS service flags (linux/ip_vs.h).
const (
	FlagPersistent uint32 = 0x1
	flagHashed     uint32 = 0x2 // set by the kernel on every listed service
	FlagOnePacket  uint32 = 0x4
	FlagSched1     uint32 = 0x8
	FlagSched2     uint32 = 0x10
	FlagSched3     uint32 = 0x20
)

// Key identifies s in the kernel.
func (s Service) Key() ServiceKey {
	return ServiceKey{Addr: s.Addr, Port: s.Port, Protocol: s.Protocol}
}

func (s Service) String() string { return s.Key().String() }

// ServiceKey is what identifies a virtual server.
type ServiceKey struct {
	Addr     netip.Addr
	Port     uint16
	Protocol proxy.Protocol
}

func (k ServiceKey) String() string {
	return k.Protocol.Lower() + ":" + netip.AddrPortFrom(k.Addr, k.Port).String()
}

// Destination is a real server of a virtual server. Connections are
// forwarded by masquerading (NAT): the only method that works for pods.
type Destination struct {
	Addr   netip.Addr
	Port   uint16
	Weight int
	// ActiveConns and InactiveConns are read from the kernel (ignored
	// when writing): graceful termination waits for both to reach 0.
	ActiveConns, InactiveConns uint32
}

// Key is the destination's address:port.
func (d Destination) Key() netip.AddrPort { return netip.AddrPortFrom(d.Addr, d.Port) }

// Timeouts are the IPVS connection timeouts (0 in SetTimeouts: leave
// unchanged).
type Timeouts struct {
	TCP, TCPFin, UDP time.Duration
}

// Handle is the IPVS table of one network namespace. Netlink talks to the
// kernel; Fake is the stateful stand-in the contract test holds to the
// same behaviour.
type Handle interface {
	AddService(Service) error
	UpdateService(Service) error
	DeleteService(ServiceKey) error
	Services() ([]Service, error)
	// Service reads one virtual server (ok false: none).
	Service(ServiceKey) (svc Service, ok bool, err error)
	AddDestination(ServiceKey, Destination) error
	UpdateDestination(ServiceKey, Destination) error
	DeleteDestination(ServiceKey, netip.AddrPort) error
	Destinations(ServiceKey) ([]Destination, error)
	Timeouts() (Timeouts, error)
	SetTimeouts(Timeouts) error
	// Apply makes the writes ops in order, many to a request where the
	// handle can, and waits for the kernel's answers per request, not
	// per write. It goes on past a failed write, as the kernel goes on
	// with the rest of a request, and returns the first failure.
	Apply(ops []Op) error
	Close() error
}

// OpKind is what an Op writes.
type OpKind uint8

const (
	OpAddService OpKind = iota + 1
	OpUpdateService
	OpDeleteService // ESRCH (already gone) counts as done
	OpAddDestination
	OpUpdateDestination
	OpDeleteDestination // ENOENT (already gone) counts as done
)

// Op is one write of Handle.Apply: Svc for the service operations (its
// key for OpDeleteService), Svc's key and Dest for the destination ones.
type Op struct {
	Kind OpKind
	Svc  Service
	Dest Destination
}

func (op Op) String() string {
	k := op.Svc.Key()
	switch op.Kind {
	case OpAddService:
		return "add ipvs service " + k.String()
	case OpUpdateService:
		return "update ipvs service " + k.String()
	case OpDeleteService:
		return "delete ipvs service " + k.String()
	case OpAddDestination:
		return "add ipvs destination " + op.Dest.Key().String() + " to " + k.String()
	case OpUpdateDestination:
		return "update ipvs destination " + op.Dest.Key().String() + " of " + k.String()
	case OpDeleteDestination:
		return "delete ipvs destination " + op.Dest.Key().String() + " of " + k.String()
	}
	return fmt.Sprintf("ipvs op %d on %s", op.Kind, k)
}

// validate refuses what the kernel would refuse for a reason of ours.
func (op Op) validate() error {
	switch op.Kind {
	case OpAddService, OpUpdateService:
		return op.Svc.validate()
	case OpAddDestination, OpUpdateDestination:
		return op.Dest.validate(op.Svc.Key())
	case OpDeleteService, OpDeleteDestination:
		return nil
	}
	return fmt.Errorf("%s: unknown operation", op)
}

// ErrNoIPVS is what Open returns on a kernel without IPVS.
var ErrNoIPVS = errors.New("the kernel has no IPVS (ip_vs): /proc/net/ip_vs missing and the IPVS generic netlink family unknown")

// validate refuses what the kernel would refuse for a reason of ours, with
// a clearer message.
func (s Service) validate() error {
	if !s.Addr.IsValid() {
		return fmt.Errorf("ipvs service %s: no address", s)
	}
	switch s.Protocol {
	case proxy.TCP, proxy.UDP, proxy.SCTP:
	default:
		return fmt.Errorf("ipvs service %s: unknown protocol %q", s, s.Protocol)
	}
	if s.Scheduler == "" {
		return fmt.Errorf("ipvs service %s: no scheduler", s)
	}
	return nil
}
