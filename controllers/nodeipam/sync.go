package nodeipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// sync brings one Node to holding a CIDR per family, from the cache.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		c.forgetLocked(name)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node %s from cache: %w", name, err)
	}
	if hasCIDRs(node) {
		c.adopt(node)
		return c.clearUnavailable(ctx, node)
	}
	return c.assign(ctx, node)
}

// occupyExisting adopts the CIDRs of every cached Node, oldest first so
// that in a conflict the Node that had the CIDR first keeps it.
func (c *Controller) occupyExisting() int {
	nodes, _ := c.nodes.List(labels.Everything()) // a cache list cannot fail
	slices.SortFunc(nodes, func(a, b *corev1.Node) int {
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return cmp.Compare(a.Name, b.Name)
	})
	n := 0
	for _, node := range nodes {
		if hasCIDRs(node) {
			c.adopt(node)
			n++
		}
	}
	return n
}

func (c *Controller) adopt(node *corev1.Node) {
	cidrs, problems := nodeCIDRs(node)
	c.mu.Lock()
	problems = append(problems, c.adoptLocked(node, cidrs)...)
	c.mu.Unlock()
	c.report(node, problems)
}

// report logs and records a Node's CIDR problems once per distinct set of
// problems, not on every resync.
func (c *Controller) report(node *corev1.Node, problems []string) {
	msg := strings.Join(problems, "; ")
	key := string(node.UID) + "/" + msg
	c.mu.Lock()
	seen := c.warned[node.Name] == key
	if msg == "" {
		delete(c.warned, node.Name)
	} else {
		c.warned[node.Name] = key
	}
	c.mu.Unlock()
	if msg == "" || seen {
		return
	}
	c.log.Warn("leaving node pod CIDRs alone", "node", node.Name, "podCIDRs", node.Spec.PodCIDRs, "problem", msg)
	c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonInvalidPodCIDR, "Node %s: %s", node.Name, msg)
}

// assign chooses CIDRs for a Node without any (or reuses the ones chosen
// for it before a failed write) and writes them.
func (c *Controller) assign(ctx context.Context, node *corev1.Node) error {
	name := node.Name
	c.mu.Lock()
	a := c.byNode[name]
	if a != nil && a.uid == node.UID {
		// Our PATCH landed; the informer has not delivered it yet.
		c.mu.Unlock()
		return nil
	}
	if a == nil || !c.complete(a) {
		if a != nil {
			for _, p := range a.cidrs {
				c.releaseLocked(name, p)
			}
			delete(c.byNode, name)
		}
		cidrs, err := c.allocateLocked(name)
		if err != nil {
			condWritten, seen := c.waiting[name]
			c.waiting[name] = condWritten
			c.mu.Unlock()
			condWritten, err = c.exhausted(ctx, node, !seen, condWritten, err)
			c.mu.Lock()
			if _, ok := c.waiting[name]; ok {
				c.waiting[name] = condWritten
			}
			c.mu.Unlock()
			return err
		}
		a = &assignment{cidrs: cidrs}
		c.byNode[name] = a
	}
	// A complete assignment of a deleted incarnation of this Node is as
	// good as a fresh one: no Node holds those CIDRs any more.
	a.uid = ""
	delete(c.waiting, name)
	cidrs := slices.Clone(a.cidrs)
	c.mu.Unlock()

	err := c.patchCIDRs(ctx, name, cidrs)
	switch {
	case err == nil:
		c.mu.Lock()
		if c.byNode[name] == a {
			a.uid = node.UID
		}
		c.mu.Unlock()
		c.log.Info("assigned pod CIDRs", "node", name, "podCIDRs", cidrs)
		return nil
	case apierrors.IsNotFound(err):
		return nil // its delete event releases the reservation
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err):
		// Most likely the Node got CIDRs meanwhile (an earlier instance
		// of this controller wrote them after our cache was filled); they
		// are immutable, so take what it holds.
		fresh, gerr := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			return nil
		case gerr != nil:
			return errors.Join(fmt.Errorf("patch node %s podCIDRs %v: %w", name, cidrs, err),
				fmt.Errorf("re-read node %s: %w", name, gerr))
		case hasCIDRs(fresh):
			c.log.Info("node got pod CIDRs elsewhere; adopting them", "node", name, "podCIDRs", fresh.Spec.PodCIDRs, "chosen", cidrs)
			c.adopt(fresh)
			return nil
		}
	}
	return fmt.Errorf("patch node %s podCIDRs %v: %w", name, cidrs, err)
}

// exhausted reports a Node that found a cluster CIDR full: an Event the
// first time, the NetworkUnavailable condition unless written already. It
// returns whether the condition is written, and err so that the Node is
// retried with backoff.
func (c *Controller) exhausted(ctx context.Context, node *corev1.Node, first, condWritten bool, err error) (bool, error) {
	msg := fmt.Sprintf("no pod CIDR available: %v", err)
	if first {
		c.log.Warn("cluster CIDR exhausted; node waits for a release", "node", node.Name, "err", err)
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRNotAvailable, "Node %s: %s", node.Name, msg)
	}
	if condWritten || hasUnavailable(node, corev1.ConditionTrue, ConditionReasonNoCIDR) {
		return true, err
	}
	if perr := c.patchUnavailable(ctx, node.Name, corev1.ConditionTrue, ConditionReasonNoCIDR, msg); perr != nil {
		return false, errors.Join(err, perr)
	}
	return true, err
}

// clearUnavailable takes back the NetworkUnavailable=True this controller
// set while the Node waited for a CIDR. Other reasons belong to others.
func (c *Controller) clearUnavailable(ctx context.Context, node *corev1.Node) error {
	if !hasUnavailable(node, corev1.ConditionTrue, ConditionReasonNoCIDR) || !hasCIDRs(node) {
		return nil
	}
	return c.patchUnavailable(ctx, node.Name, corev1.ConditionFalse, ConditionReasonCIDRAssigned, "pod CIDR assigned")
}

func hasUnavailable(node *corev1.Node, status corev1.ConditionStatus, reason string) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeNetworkUnavailable {
			return cond.Status == status && cond.Reason == reason
		}
	}
	return false
}

// prefixStrings formats cidrs for the API.
func prefixStrings(cidrs []netip.Prefix) []string {
	s := make([]string, len(cidrs))
	for i, p := range cidrs {
		s[i] = p.String()
	}
	return s
}
