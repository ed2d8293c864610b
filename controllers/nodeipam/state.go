package nodeipam

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/ipam/cidrset"
)

// This file is the in-memory bookkeeping; every *Locked method needs c.mu.

func hasCIDRs(node *corev1.Node) bool {
	return node.Spec.PodCIDR != "" || len(node.Spec.PodCIDRs) > 0
}

// nodeCIDRs parses what node holds; unparsable values become problems.
func nodeCIDRs(node *corev1.Node) ([]netip.Prefix, []string) {
	raw := node.Spec.PodCIDRs
	if len(raw) == 0 && node.Spec.PodCIDR != "" {
		raw = []string{node.Spec.PodCIDR}
	}
	var cidrs []netip.Prefix
	var problems []string
	for _, s := range raw {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			problems = append(problems, fmt.Sprintf("pod CIDR %q does not parse: %v", s, err))
			continue
		}
		cidrs = append(cidrs, p)
	}
	return cidrs, problems
}

// setFor returns the set of p's IP family, or nil.
func (c *Controller) setFor(p netip.Prefix) *cidrset.Set {
	for _, s := range c.sets {
		if s.ClusterCIDR().Addr().Is4() == p.Addr().Is4() {
			return s
		}
	}
	return nil
}

// complete reports whether a holds one CIDR per set, in set order: what a
// Node without CIDRs can be given.
func (c *Controller) complete(a *assignment) bool {
	if len(a.cidrs) != len(c.sets) {
		return false
	}
	for i, s := range c.sets {
		if !s.ClusterCIDR().Contains(a.cidrs[i].Addr()) {
			return false
		}
	}
	return true
}

// adoptLocked records that node holds cidrs in the API and returns what is
// wrong with them. A CIDR another Node only has reserved goes to node (the
// API is the truth; the other Node chooses again); one that another Node
// holds is a conflict, left as it is.
func (c *Controller) adoptLocked(node *corev1.Node, cidrs []netip.Prefix) []string {
	name := node.Name
	var held []netip.Prefix
	var problems []string
	for _, p := range cidrs {
		if owner, ok := c.owners[p]; ok && owner != name {
			if a := c.byNode[owner]; a != nil && a.uid == "" {
				c.dropReservationLocked(owner)
			} else {
				if !slices.Contains(c.claims[p], name) {
					c.claims[p] = append(c.claims[p], name)
				}
				problems = append(problems, fmt.Sprintf("pod CIDR %s is also assigned to node %s", p, owner))
				continue
			}
		}
		s := c.setFor(p)
		if s == nil {
			problems = append(problems, fmt.Sprintf("pod CIDR %s is of an IP family without a cluster CIDR", p))
			continue
		}
		if err := s.Occupy(p); err != nil {
			problems = append(problems, fmt.Sprintf("pod CIDR %s does not fit cluster CIDR %s with /%d node subnets: %v",
				p, s.ClusterCIDR(), s.MaskSize(), err))
			continue
		}
		c.owners[p] = name
		held = append(held, p)
	}
	if prev := c.byNode[name]; prev != nil {
		for _, p := range prev.cidrs {
			if !slices.Contains(held, p) {
				c.releaseLocked(name, p)
			}
		}
	}
	if len(cidrs) > 0 && len(cidrs) < len(c.sets) {
		problems = append(problems, fmt.Sprintf("node holds %d pod CIDR(s) but the cluster has %d families; podCIDRs are immutable, so it keeps them",
			len(cidrs), len(c.sets)))
	}
	c.byNode[name] = &assignment{cidrs: held, uid: node.UID}
	delete(c.waiting, name)
	return problems
}

// dropReservationLocked frees what name has chosen but not written, and
// requeues it to choose again.
func (c *Controller) dropReservationLocked(name string) {
	for _, p := range c.byNode[name].cidrs {
		c.releaseLocked(name, p)
	}
	delete(c.byNode, name)
	c.queue.Add(name)
}

// allocateLocked chooses one free CIDR per set for name, all or nothing.
func (c *Controller) allocateLocked(name string) ([]netip.Prefix, error) {
	cidrs := make([]netip.Prefix, 0, len(c.sets))
	for _, s := range c.sets {
		p, err := s.Allocate()
		if err != nil {
			for _, q := range cidrs {
				// Straight to the set: nothing was really free for a waiter.
				_ = c.setFor(q).Release(q)
			}
			return nil, err
		}
		cidrs = append(cidrs, p)
	}
	for _, p := range cidrs {
		c.owners[p] = name
	}
	return cidrs, nil
}

// releaseLocked gives up name's hold on p: to the next Node that claims p
// too, or back to the set, waking every Node waiting for a CIDR.
func (c *Controller) releaseLocked(name string, p netip.Prefix) {
	if c.owners[p] != name {
		return
	}
	if others := c.claims[p]; len(others) > 0 {
		next := others[0]
		if len(others) == 1 {
			delete(c.claims, p)
		} else {
			c.claims[p] = others[1:]
		}
		c.owners[p] = next
		if a := c.byNode[next]; a != nil {
			a.cidrs = append(a.cidrs, p)
		}
		c.queue.Add(next) // to clear its warning on the next resync
		return
	}
	delete(c.owners, p)
	if s := c.setFor(p); s != nil {
		_ = s.Release(p) // owners only holds CIDRs the set accepted
	}
	for w := range c.waiting {
		c.queue.Add(w)
	}
}

// forgetLocked releases everything of a deleted Node.
func (c *Controller) forgetLocked(name string) {
	if a := c.byNode[name]; a != nil {
		for _, p := range a.cidrs {
			c.releaseLocked(name, p)
		}
	}
	delete(c.byNode, name)
	delete(c.waiting, name)
	delete(c.warned, name)
	for p, names := range c.claims {
		if i := slices.Index(names, name); i >= 0 {
			names = slices.Delete(names, i, i+1)
			if len(names) == 0 {
				delete(c.claims, p)
			} else {
				c.claims[p] = names
			}
		}
	}
}
