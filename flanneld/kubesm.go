package flanneld

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

var everything = labels.Everything()

// kubeManager is the kube subnet manager (--kube-subnet-mgr): the node's
// subnet is node.spec.podCIDRs, assigned by the node IPAM controller; peers
// are the other Nodes carrying flannel's annotations.
type kubeManager struct {
	client   kubernetes.Interface
	nodeName string
	cfg      *Config
	notify   func()
	log      *slog.Logger

	factory informers.SharedInformerFactory
	cancel  context.CancelFunc
	nodes   corelisters.NodeLister
	synced  cache.InformerSynced
	// self is nudged when our own Node changes, to end a wait for the
	// podCIDR without polling.
	self chan struct{}
	// invalid remembers peers already reported as unusable, so a resync
	// does not log them again.
	invalid map[string]string
}

func newKubeManager(client kubernetes.Interface, nodeName string, cfg *Config, notify func(), log *slog.Logger) *kubeManager {
	return &kubeManager{client: client, nodeName: nodeName, cfg: cfg, notify: notify, log: log,
		self: make(chan struct{}, 1), invalid: map[string]string{}}
}

// Start runs the node informer and returns once it has synced.
func (m *kubeManager) Start(ctx context.Context) error {
	m.factory = informers.NewSharedInformerFactory(m.client, 5*time.Minute)
	inf := m.factory.Core().V1().Nodes()
	m.nodes = inf.Lister()
	reg, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: m.changed,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 && !relevantChange(o, n) {
				return // a heartbeat or a resync: nothing a route depends on
			}
			m.changed(cur)
		},
		DeleteFunc: m.changed,
	})
	if err != nil {
		return fmt.Errorf("register node handlers: %w", err)
	}
	m.synced = reg.HasSynced
	ctx, m.cancel = context.WithCancel(ctx)
	m.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), m.synced) {
		return fmt.Errorf("wait for node informer to sync: %w", context.Cause(ctx))
	}
	return nil
}

// Stop shuts the informers down.
func (m *kubeManager) Stop() {
	if m.factory != nil {
		m.cancel()
		m.factory.Shutdown()
	}
}

func (m *kubeManager) changed(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*corev1.Node); ok && n.Name == m.nodeName {
		select {
		case m.self <- struct{}{}:
		default:
		}
	}
	m.notify()
}

// relevantChange reports whether a Node update can change a lease: the
// kubelet's status heartbeats, every few seconds per node, must not each
// cost a full sync on every node.
func relevantChange(o, n *corev1.Node) bool {
	if o.ResourceVersion == n.ResourceVersion {
		return false
	}
	if o.Spec.PodCIDR != n.Spec.PodCIDR || len(o.Spec.PodCIDRs) != len(n.Spec.PodCIDRs) {
		return true
	}
	for i := range o.Spec.PodCIDRs {
		if o.Spec.PodCIDRs[i] != n.Spec.PodCIDRs[i] {
			return true
		}
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, AnnotationPrefix) && o.Annotations[k] != v {
			return true
		}
	}
	for k := range o.Annotations {
		if _, ok := n.Annotations[k]; !ok && strings.HasPrefix(k, AnnotationPrefix) {
			return true
		}
	}
	return false
}

// Self returns what our Node says about us from a previous run, and the
// addresses an administrator pinned with node-public-ip(v6).
func (m *kubeManager) Self() selfInfo {
	n, err := m.nodes.Get(m.nodeName)
	if err != nil {
		return selfInfo{}
	}
	s := selfInfo{
		BackendData:   json.RawMessage(n.Annotations[AnnBackendData]),
		BackendV6Data: json.RawMessage(n.Annotations[AnnBackendV6Data]),
	}
	if a, err := netip.ParseAddr(n.Annotations[AnnNodePublicIP]); err == nil && a.Is4() {
		s.NodePublicIP = a
	}
	if a, err := netip.ParseAddr(n.Annotations[AnnNodePublicIPv6]); err == nil && a.Is6() {
		s.NodePublicIPv6 = a
	}
	return s
}

// Acquire publishes attrs on our Node and returns our lease, waiting (and
// saying so) until the Node exists and has a podCIDR for every enabled
// family.
func (m *kubeManager) Acquire(ctx context.Context, attrs LocalAttrs, waiting func(string)) (Lease, error) {
	var lastWhy string
	for {
		l, why, err := m.tryAcquire(ctx, attrs)
		if err != nil || why == "" {
			return l, err
		}
		if why != lastWhy {
			m.log.Info("waiting for this node's pod CIDR", "node", m.nodeName, "reason", why)
			waiting(why)
			lastWhy = why
		}
		select {
		case <-ctx.Done():
			return Lease{}, context.Cause(ctx)
		case <-m.self:
		case <-time.After(10 * time.Second):
		}
	}
}

// tryAcquire returns a non-empty why when the caller should wait.
func (m *kubeManager) tryAcquire(ctx context.Context, attrs LocalAttrs) (Lease, string, error) {
	n, err := m.nodes.Get(m.nodeName)
	if apierrors.IsNotFound(err) {
		return Lease{}, fmt.Sprintf("node %s does not exist (yet)", m.nodeName), nil
	}
	if err != nil {
		return Lease{}, "", fmt.Errorf("get node %s: %w", m.nodeName, err)
	}
	v4, v6, err := podCIDRs(n)
	if err != nil {
		return Lease{}, "", err
	}
	switch {
	case m.cfg.EnableIPv4 && !v4.IsValid():
		return Lease{}, fmt.Sprintf("node %s has no IPv4 spec.podCIDRs yet (is the node IPAM controller running with --cluster-cidr=%s?)", m.nodeName, m.cfg.Network), nil
	case m.cfg.EnableIPv6 && !v6.IsValid():
		return Lease{}, fmt.Sprintf("node %s has no IPv6 spec.podCIDRs yet (cluster CIDR %s)", m.nodeName, m.cfg.IPv6Network), nil
	}
	l := Lease{Node: m.nodeName, BackendType: attrs.BackendType, BackendData: attrs.BackendData, BackendV6Data: attrs.BackendV6Data,
		PublicIP: attrs.PublicIP, PublicIPv6: attrs.PublicIPv6}
	if m.cfg.EnableIPv4 {
		if !containsPrefix(m.cfg.Network, v4) {
			return Lease{}, "", fmt.Errorf("node %s podCIDR %s is not inside the flannel Network %s (net-conf.json and the controller's --cluster-cidr disagree)", m.nodeName, v4, m.cfg.Network)
		}
		l.Subnet = v4
	}
	if m.cfg.EnableIPv6 {
		if !containsPrefix(m.cfg.IPv6Network, v6) {
			return Lease{}, "", fmt.Errorf("node %s IPv6 podCIDR %s is not inside the flannel IPv6Network %s", m.nodeName, v6, m.cfg.IPv6Network)
		}
		l.IPv6Subnet = v6
	}
	want := publishedAnnotations(n.Annotations, attrs)
	if needsPatch(n.Annotations, want) {
		if err := m.patchAnnotations(ctx, want); err != nil {
			return Lease{}, "", err
		}
	}
	if ow := n.Annotations[AnnPublicIPOverwrite]; ow != "" {
		if a, err := netip.ParseAddr(ow); err == nil {
			l.PublicIP = a
		}
	}
	return l, "", nil
}

// patchAnnotations publishes the annotations through nodes/status, as
// upstream flanneld does: kube-apiserver keeps metadata changes there, and
// a DaemonSet then needs only "patch nodes/status" (kube-flannel.yml's
// ClusterRole and nodenet's), not write access to every node's spec.
func (m *kubeManager) patchAnnotations(ctx context.Context, ann map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return fmt.Errorf("encode annotation patch: %w", err)
	}
	if _, err := m.client.CoreV1().Nodes().Patch(ctx, m.nodeName, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("publish flannel annotations on node %s: %w", m.nodeName, err)
	}
	return nil
}

// Peers returns every other participating node's lease, sorted by name.
func (m *kubeManager) Peers() []Lease {
	nodes, err := m.nodes.List(everything)
	if err != nil {
		return nil
	}
	out := make([]Lease, 0, len(nodes))
	for _, n := range nodes {
		if n.Name == m.nodeName {
			continue
		}
		l, ok, err := nodeLease(n)
		if err != nil {
			if m.invalid[n.Name] != err.Error() {
				m.log.Warn("ignoring node with unusable flannel data", "node", n.Name, "err", err)
				m.invalid[n.Name] = err.Error()
			}
			continue
		}
		if ok {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Keep has nothing to renew in kube mode: the podCIDR is the Node's.
func (m *kubeManager) Keep(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Complete sets NodeNetworkUnavailable=False with upstream's reason.
func (m *kubeManager) Complete(ctx context.Context) error {
	return setNetworkAvailable(ctx, m.client, m.nodeName)
}

func setNetworkAvailable(ctx context.Context, client kubernetes.Interface, node string) error {
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse,
		Reason: ConditionReasonFlannelUp, Message: conditionMessageFlannelUp, LastHeartbeatTime: now, LastTransitionTime: now}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return fmt.Errorf("encode condition patch: %w", err)
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("set node %s condition NetworkUnavailable=False: %w", node, err)
	}
	return nil
}

func containsPrefix(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}
