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
	AddDestination(ServiceKey, Destination) error
	UpdateDestination(ServiceKey, Destination) error
	DeleteDestination(ServiceKey, netip.AddrPort) error
	Destinations(ServiceKey) ([]Destination, error)
	Timeouts() (Timeouts, error)
	SetTimeouts(Timeouts) error
	Close() error
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
