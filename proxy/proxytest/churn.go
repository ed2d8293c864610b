package proxytest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nodenet/nodenet/proxy"
)

// Churn is the random service churn behind each data plane's
// TestPartialEqualsFull: from a fixed seed, 20 IPv4 services to start
// with, then each round one to three services added, changed or deleted.
type Churn struct {
	rng   *rand.Rand
	opts  ChurnOpts
	ports map[proxy.ServicePortName]*proxy.ServicePort
}

// ChurnOpts adds features to the random services.
type ChurnOpts struct {
	// VaryAffinity gives affinity timeouts of one or two minutes rather
	// than always one.
	VaryAffinity bool
	// SharedExternalIP, when set, is claimed by several services.
	SharedExternalIP string
}

// NewChurn starts a churn with its first 20 services.
func NewChurn(opts ChurnOpts) *Churn {
	c := &Churn{rng: rand.New(rand.NewPCG(1, 2)), opts: opts, ports: map[proxy.ServicePortName]*proxy.ServicePort{}}
	for i := range 20 {
		sp := c.random(i)
		c.ports[sp.Name] = sp
	}
	return c
}

// Snapshot is the current services (copies: a snapshot selects endpoints
// in its ports).
func (c *Churn) Snapshot() *proxy.Snapshot {
	var list []*proxy.ServicePort
	for _, sp := range c.ports {
		cp := *sp
		list = append(list, &cp)
	}
	return Snapshot(proxy.IPv4, list...)
}

// Next makes one round of random changes and returns the new snapshot and
// the ChangeSet naming what changed.
func (c *Churn) Next() (*proxy.Snapshot, proxy.ChangeSet) {
	rng := c.rng
	var names []proxy.ServicePortName
	for range 1 + rng.IntN(3) {
		i := rng.IntN(25)
		sp := c.random(i)
		if rng.IntN(5) == 0 {
			delete(c.ports, sp.Name)
		} else {
			c.ports[sp.Name] = sp
		}
		names = append(names, sp.Name)
	}
	return c.Snapshot(), Changed(names...)
}

// random builds service i with random endpoints and features.
func (c *Churn) random(i int) *proxy.ServicePort {
	rng := c.rng
	var opts []PortOpt
	var eps []string
	for j := range rng.IntN(4) {
		eps = append(eps, fmt.Sprintf("10.244.%d.%d", rng.IntN(3), j+1))
	}
	opts = append(opts, WithEndpoints(8080, eps...))
	if rng.IntN(2) == 0 {
		opts = append(opts, WithLocalEndpoints(8080, fmt.Sprintf("10.244.0.%d", 100+rng.IntN(2))))
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, WithNodePort(uint16(30000+i)))
	}
	if rng.IntN(4) == 0 {
		opts = append(opts, WithETPLocal)
	}
	if rng.IntN(4) == 0 {
		opts = append(opts, WithLB(fmt.Sprintf("192.0.2.%d", i%250+1), "203.0.113.0/24"))
	}
	if rng.IntN(5) == 0 {
		timeout := time.Minute
		if c.opts.VaryAffinity {
			timeout = time.Duration(1+rng.IntN(2)) * time.Minute
		}
		opts = append(opts, WithAffinity(timeout))
	}
	if rng.IntN(5) == 0 {
		opts = append(opts, WithITPLocal)
	}
	if c.opts.SharedExternalIP != "" && rng.IntN(6) == 0 {
		opts = append(opts, WithExternalIPs(c.opts.SharedExternalIP))
	}
	proto := []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}[rng.IntN(3)]
	return Port("ns", fmt.Sprint("svc", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), 80, proto, opts...)
}
