package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/cluster"
)

// vtepAnnotation is where flanneld publishes a node's VXLAN endpoint.
const vtepAnnotation = "flannel.alpha.coreos.com/backend-data"

// nodeRestart is issue 17's fault 5: the last node (it runs echo pods, no
// client, so the load's own logs survive) restarted as a reboot would,
// through `nodenet node restart`'s path (cluster.RestartNodeVia: the
// cluster's `up` kills every process of the node and its pods, removes
// their namespaces and the node's /run, and brings the node back with the
// same name). Restored: the node is back and its agent started. Green:
// the node Ready, its echo pods Running and Ready with IPs, the Service
// at its stable endpoints. Then the checks: the same podCIDR, the node's
// host-local store holding exactly its live pods' IPs, and on every other
// node no stale state for it: the route to its podCIDR via its address,
// (vxlan) one FDB entry for it with its current VTEP MAC and the
// neighbour entry of its VTEP with that MAC, its eth0 neighbour entry
// with its (kept) MAC, and no neighbour entry for an old pod IP.
func nodeRestart(ctx context.Context, e *env) (Outcome, error) {
	i := len(e.nodes)
	n := e.nodes[i-1]
	stable := len(e.nodes) * echoPerNode
	oldIPs, err := podIPsOn(ctx, e, n.Name, false, time.Time{})
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{Start: time.Now()}
	// The Service's endpoints are sampled through the whole window.
	var (
		mu       sync.Mutex
		minReady = stable
		minAt    time.Duration
		backAt   time.Duration
	)
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sctx.Err() == nil {
			if k, err := readyEndpoints(sctx, e.cs); err == nil {
				at := time.Since(o.Start)
				mu.Lock()
				if k < minReady {
					minReady, minAt, backAt = k, at, 0
				} else if k == stable && minReady < stable && backAt == 0 {
					backAt = at
				}
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	r, err := cluster.RestartNodeVia(ctx, e.dir, n.Name)
	if err != nil {
		stopSampling()
		wg.Wait()
		return o, err
	}
	o.Restored = time.Now()
	// Right after the restart the API still shows the old statuses (Ready,
	// the old IPs): green needs each pod's containers started again since
	// the restart, its IP reserved in the node's store, and the Service's
	// ready endpoints at the stable count with those IPs among them.
	o.Green = waitFor(ctx, 2*e.timeout, func() bool {
		if !isReady(ctx, e, n.Name) {
			return false
		}
		ips, err := podIPsOn(ctx, e, n.Name, true, o.Start)
		if err != nil || len(ips) != len(oldIPs) {
			return false
		}
		for ip := range ips {
			if !reserved(e.dir, n.Name, ip) {
				return false
			}
		}
		addrs, err := readyAddresses(ctx, e)
		if err != nil || len(addrs) != stable {
			return false
		}
		for ip := range ips {
			if !addrs[ip] {
				return false
			}
		}
		return true
	})
	stopSampling()
	wg.Wait()
	if backAt == 0 && minReady < stable && !o.Green.IsZero() {
		// The sampler stopped before it saw the return green saw.
		backAt = o.Green.Sub(o.Start)
	}
	if o.Green.IsZero() {
		return o, fmt.Errorf("%s not back (Ready, its pods Ready, the Service at %d endpoints) within %s", n.Name, stable, 2*e.timeout)
	}
	newIPs, err := podIPsOn(ctx, e, n.Name, true, o.Start)
	if err != nil {
		return o, err
	}
	var problems []string
	after, err := e.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return o, err
	}
	if after.Spec.PodCIDR != n.Spec.PodCIDR {
		problems = append(problems, fmt.Sprintf("podCIDR %s, was %s", after.Spec.PodCIDR, n.Spec.PodCIDR))
	}
	if leaked := storeLeaks(e.dir, n.Name, newIPs); len(leaked) > 0 {
		problems = append(problems, "host-local store holds "+strings.Join(leaked, ", ")+" of no live pod")
	}
	gone := map[string]bool{}
	for ip := range oldIPs {
		if !newIPs[ip] {
			gone[ip] = true
		}
	}
	for j := 1; j <= len(e.nodes); j++ {
		if j == i {
			continue
		}
		problems = append(problems, staleOn(ctx, e, j, after, r.MAC, gone)...)
	}
	mu.Lock()
	o.Note = fmt.Sprintf("%s restarted in %s (%d pod namespaces removed); podCIDR %s kept; pod IPs %s → %s; ready endpoints down to %d/%d at +%.1f s, all back at +%.1f s",
		n.Name, r.Took.Round(time.Millisecond), len(r.PodNetns), after.Spec.PodCIDR, setString(oldIPs), setString(newIPs), minReady, stable, minAt.Seconds(), backAt.Seconds())
	mu.Unlock()
	if len(problems) > 0 {
		o.Note += "; STALE: " + strings.Join(problems, "; ")
		return o, fmt.Errorf("after the restart of %s: %s", n.Name, strings.Join(problems, "; "))
	}
	o.Note += "; no stale route, FDB or neighbour entry on the other nodes, no leaked IP"
	return o, nil
}

// podIPsOn are the IPs of the echo pods on node; with ready, only of
// those Running and Ready whose containers all started at or after since
// (the API keeps start times to the second).
func podIPsOn(ctx context.Context, e *env, node string, ready bool, since time.Time) (map[string]bool, error) {
	pods, err := e.cs.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "app=echo", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	ips := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		if !ready {
			ips[p.Status.PodIP] = true
			continue
		}
		if p.Status.Phase != corev1.PodRunning || !startedSince(p, since.Truncate(time.Second)) {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ips[p.Status.PodIP] = true
			}
		}
	}
	return ips, nil
}

// storeLeaks are the addresses node's host-local store reserves for no
// pod in live (the node runs only the echo pods and hostNetwork daemons).
func storeLeaks(dir, node string, live map[string]bool) []string {
	ents, _ := os.ReadDir(filepath.Join(dir, "nodes", node, "var", "lib", "cni", "networks", "cbr0"))
	var out []string
	for _, ent := range ents {
		if _, err := netip.ParseAddr(ent.Name()); err == nil && !live[ent.Name()] {
			out = append(out, ent.Name())
		}
	}
	return out
}

// staleOn checks node j's state about the restarted node.
func staleOn(ctx context.Context, e *env, j int, restarted *corev1.Node, eth0MAC string, gone map[string]bool) []string {
	ns, ip := e.nodeNetns(j), internalIP(*restarted)
	where := fmt.Sprintf("node-%d", j)
	var problems []string
	route, err := run(ctx, "ip", "-n", ns, "-4", "route", "show", "exact", restarted.Spec.PodCIDR)
	if err != nil || strings.Count(strings.TrimSpace(route), "\n") != 0 || strings.TrimSpace(route) == "" {
		problems = append(problems, fmt.Sprintf("%s: route to %s: %q", where, restarted.Spec.PodCIDR, strings.TrimSpace(route)))
	} else if e.backend == "host-gw" && !strings.Contains(route, "via "+ip+" ") {
		problems = append(problems, fmt.Sprintf("%s: route to %s not via %s: %q", where, restarted.Spec.PodCIDR, ip, strings.TrimSpace(route)))
	}
	neigh, err := run(ctx, "ip", "-n", ns, "-4", "neigh", "show")
	if err != nil {
		return append(problems, err.Error())
	}
	for _, l := range strings.Split(neigh, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if gone[f[0]] {
			problems = append(problems, fmt.Sprintf("%s: neighbour entry for the old pod IP %s", where, strings.TrimSpace(l)))
		}
		if f[0] == ip && strings.Contains(l, "lladdr ") && !strings.Contains(l, "lladdr "+eth0MAC) {
			problems = append(problems, fmt.Sprintf("%s: neighbour entry for %s with a MAC not its eth0's (%s): %s", where, ip, eth0MAC, strings.TrimSpace(l)))
		}
	}
	if e.backend != "vxlan" {
		return problems
	}
	var vtep struct {
		VtepMAC string `json:"VtepMAC"`
	}
	if err := json.Unmarshal([]byte(restarted.Annotations[vtepAnnotation]), &vtep); err != nil || vtep.VtepMAC == "" {
		return append(problems, fmt.Sprintf("%s has no VtepMAC in %s: %v", restarted.Name, vtepAnnotation, err))
	}
	fdb, err := run(ctx, "bridge", "-n", ns, "fdb", "show", "dev", vxlanDevice)
	if err != nil {
		return append(problems, err.Error())
	}
	entries := 0
	for _, l := range strings.Split(fdb, "\n") {
		if strings.Contains(l, "dst "+ip+" ") {
			entries++
			if !strings.HasPrefix(l, vtep.VtepMAC+" ") {
				problems = append(problems, fmt.Sprintf("%s: FDB entry for %s not with its VTEP MAC %s: %s", where, ip, vtep.VtepMAC, strings.TrimSpace(l)))
			}
		}
	}
	if entries == 0 {
		problems = append(problems, fmt.Sprintf("%s: no FDB entry for %s", where, ip))
	}
	vtepIP := strings.TrimSuffix(restarted.Spec.PodCIDR, "/24")
	for _, l := range strings.Split(neigh, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == vtepIP && strings.Contains(l, "dev "+vxlanDevice) && !strings.Contains(l, "lladdr "+vtep.VtepMAC) {
			problems = append(problems, fmt.Sprintf("%s: neighbour entry of %s's VTEP not with %s: %s", where, restarted.Name, vtep.VtepMAC, strings.TrimSpace(l)))
		}
	}
	return problems
}

func setString(m map[string]bool) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

// startedSince is whether every container of p runs and started at or
// after t.
func startedSince(p corev1.Pod, t time.Time) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil || c.State.Running.StartedAt.Time.Before(t) {
			return false
		}
	}
	return true
}

// reserved is whether node's host-local store holds ip.
func reserved(dir, node, ip string) bool {
	_, err := os.Stat(filepath.Join(dir, "nodes", node, "var", "lib", "cni", "networks", "cbr0", ip))
	return err == nil
}

// readyAddresses are the Service's ready endpoint addresses.
func readyAddresses(ctx context.Context, e *env) (map[string]bool, error) {
	sl, err := e.cs.DiscoveryV1().EndpointSlices(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + serviceName})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range sl.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				for _, a := range ep.Addresses {
					out[a] = true
				}
			}
		}
	}
	return out, nil
}
