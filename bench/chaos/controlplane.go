package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiserverGap is issue 17's fault 2: the API server (with its embedded
// etcd) frozen for gap (SIGSTOP: its clients' connections stay open and
// silent, as with a hung server) and then killed, so that it restarts
// with an empty watch cache. The note counts the LISTs the new process
// served in its first listWindow, by resource, against the watches open
// then: every client relisting once is expected, a storm is not.
func apiserverGap(gap, listWindow time.Duration) func(ctx context.Context, e *env) (Outcome, error) {
	return func(ctx context.Context, e *env) (Outcome, error) {
		ns := e.vpcNetns()
		pid, err := daemonPID(ns, "apiserver")
		if err != nil || pid == 0 {
			return Outcome{}, fmt.Errorf("no API server in %s: %v", ns, err)
		}
		// What the old process served since the cluster started shows the
		// counter works (its informers' first LISTs are in it).
		old, _, err := apiserverLists(ctx, e)
		if err != nil {
			return Outcome{}, err
		}
		o := Outcome{Start: time.Now()}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return o, fmt.Errorf("SIGSTOP %d: %w", pid, err)
		}
		time.Sleep(gap)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return o, fmt.Errorf("SIGKILL %d: %w", pid, err)
		}
		o.Restored = waitFor(ctx, e.timeout, func() bool {
			p, err := daemonPID(ns, "apiserver")
			return err == nil && p != 0 && p != pid
		})
		if o.Restored.IsZero() {
			return o, fmt.Errorf("the API server did not come back within %s", e.timeout)
		}
		o.Green = waitFor(ctx, e.timeout, func() bool { return apiReady(ctx, e.cs) })
		if o.Green.IsZero() {
			return o, fmt.Errorf("the API server not ready within %s of its restart", e.timeout)
		}
		time.Sleep(listWindow - time.Since(o.Restored))
		lists, watches, err := apiserverLists(ctx, e)
		if err != nil {
			return o, err
		}
		o.Note = fmt.Sprintf("frozen %s then killed; in the new process's first %s: %s, %d watches open (the old process had served %s since the cluster started)", gap, listWindow, lists, watches, old)
		return o, nil
	}
}

// apiserverLists reads the API server's /metrics: LIST and WATCH
// requests by resource (as "pods 4, nodes 9", most first) and the open
// watches. client-go's informers may start with a WATCH that sends the
// initial objects (WatchList) instead of a LIST, so both count as a
// relist.
func apiserverLists(ctx context.Context, e *env) (string, int, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := e.cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(cctx)
	if err != nil {
		return "", 0, fmt.Errorf("API server /metrics: %w", err)
	}
	byVerb := map[string]map[string]int{"LIST": {}, "WATCH": {}}
	watches := 0
	for _, l := range strings.Split(string(raw), "\n") {
		name, labels, value, ok := parseSample(l)
		if !ok {
			continue
		}
		switch {
		case name == "apiserver_request_total" && byVerb[labels["verb"]] != nil:
			byVerb[labels["verb"]][labels["resource"]] += int(value)
		case name == "apiserver_registered_watchers":
			watches += int(value)
		}
	}
	return byResource("LIST", byVerb["LIST"]) + ", " + byResource("WATCH", byVerb["WATCH"]), watches, nil
}

// byResource renders counts as "12 LIST (pods 7, nodes 5)", most first.
func byResource(verb string, counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	total := 0
	for k, n := range counts {
		keys = append(keys, k)
		total += n
	}
	sort.Slice(keys, func(i, j int) bool {
		return counts[keys[i]] > counts[keys[j]] || counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return fmt.Sprintf("%d %s (%s)", total, verb, strings.Join(parts, ", "))
}

// parseSample parses one line of the Prometheus text format,
// `name{a="b",c="d"} value`; comments and blank lines are not samples.
func parseSample(l string) (name string, labels map[string]string, value float64, ok bool) {
	if l == "" || strings.HasPrefix(l, "#") {
		return "", nil, 0, false
	}
	i := strings.LastIndexByte(l, ' ')
	if i < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(l[i+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	head := l[:i]
	labels = map[string]string{}
	if j := strings.IndexByte(head, '{'); j >= 0 && strings.HasSuffix(head, "}") {
		for _, kv := range strings.Split(head[j+1:len(head)-1], ",") {
			k, val, found := strings.Cut(kv, "=")
			if found {
				labels[k] = strings.Trim(val, `"`)
			}
		}
		head = head[:j]
	}
	return head, labels, v, true
}

// linkDown is issue 17's fault 4: the last node (echo pods, no client:
// every failure counted is the other nodes' clients failing over) cut off
// from the node network (its veth on the vpc bridge down) for hold, then
// back. The suite runs the cluster with a node monitor grace period
// shorter than hold (nodeGrace), so the node goes NotReady: the node
// lifecycle controller sets its pods not ready (their endpoints leave
// every proxy's rules) and taints it unreachable, and evictAfter later
// evicts its echo pods, whose endpoints turn terminating. When the link
// returns the node agent finishes the deletions, the endpoints are
// removed, and the suite creates the node's echo pods again (as their
// controller would). The note says when each happened; green is the node
// Ready with the stable number of endpoints ready again.
func linkDown(hold time.Duration) func(ctx context.Context, e *env) (Outcome, error) {
	return func(ctx context.Context, e *env) (Outcome, error) {
		i := len(e.nodes)
		vpc, link, node := e.vpcNetns(), "n"+strconv.Itoa(i), e.nodes[i-1].Name
		stable := len(e.nodes) * echoPerNode
		o := Outcome{Start: time.Now()}
		if _, err := run(ctx, "ip", "-n", vpc, "link", "set", link, "down"); err != nil {
			return o, err
		}
		var notReady, left, terminating time.Duration
		for time.Since(o.Start) < hold && ctx.Err() == nil {
			if notReady == 0 && !isReady(ctx, e, node) {
				notReady = time.Since(o.Start)
			}
			if c, err := countEndpoints(ctx, e.cs); err == nil {
				if left == 0 && c.ready < stable {
					left = time.Since(o.Start)
				}
				if terminating == 0 && c.terminating > 0 {
					terminating = time.Since(o.Start)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, err := run(ctx, "ip", "-n", vpc, "link", "set", link, "up"); err != nil {
			return o, fmt.Errorf("bring %s back up: %w", link, err)
		}
		o.Restored = time.Now()
		var readyAgain, removed time.Duration
		recreated := false
		var errs []error
		o.Green = waitFor(ctx, e.timeout, func() bool {
			ready := isReady(ctx, e, node)
			if ready && readyAgain == 0 {
				readyAgain = time.Since(o.Restored)
			}
			c, err := countEndpoints(ctx, e.cs)
			if err != nil {
				return false
			}
			if !recreated && terminating > 0 && c.all == stable-echoPerNode && c.terminating == 0 {
				removed = time.Since(o.Restored)
				if err := createEchoPods(ctx, e.cs, node, true); err != nil && !apierrors.IsAlreadyExists(err) {
					errs = append(errs, err)
				}
				recreated = true
			}
			return c.ready == stable && ready && (recreated || terminating == 0)
		})
		o.Note = fmt.Sprintf("%s's link down %s (grace period %s, echo pods tolerating it %s); %s; %s; %s; after the link returned: Ready after %.1f s",
			node, hold, nodeGrace, evictAfter, when(node+" NotReady", notReady), when("its endpoints not ready in the Service", left),
			when("evicted, endpoints terminating", terminating), readyAgain.Seconds())
		if removed > 0 {
			o.Note += fmt.Sprintf(", the evicted pods' endpoints removed after %.1f s (pods created again)", removed.Seconds())
		}
		if !o.Green.IsZero() {
			o.Note += fmt.Sprintf(", every endpoint ready after %.1f s", o.Green.Sub(o.Restored).Seconds())
		}
		if notReady == 0 || left == 0 || terminating == 0 {
			errs = append(errs, fmt.Errorf("%s cut off for %s with a grace period of %s: %s; %s; %s", node, hold, nodeGrace,
				when("NotReady", notReady), when("endpoints left", left), when("endpoints terminating", terminating)))
		}
		return o, errors.Join(errs...)
	}
}

func when(what string, at time.Duration) string {
	if at == 0 {
		return what + ": not during the cut"
	}
	return fmt.Sprintf("%s after %.1f s", what, at.Seconds())
}

func isReady(ctx context.Context, e *env, name string) bool {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
