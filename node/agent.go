package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/apiserver/pki"
	"github.com/nodenet/nodenet/internal/cgroup2"
)

// Options configure an Agent.
type Options struct {
	Client      kubernetes.Interface
	NodeName    string
	NodeIP      string
	Zone        string
	CNIConfDir  string // the node's /etc/cni/net.d
	CNIBinDirs  []string
	CNICacheDir string // the node's /var/lib/cni
	StateDir    string // per-pod state for adoption after a restart
	NetnsPrefix string // pod namespaces are <prefix><uid[:8]>
	Self        string // this binary, run for a container command "nodenet"
	// CNIPlugin is the nodenet-cni binary a container's
	// daemonset.NodenetCNIPath maps to; empty: nodenet-cni next to Self.
	CNIPlugin string
	// HostRoot is where a hostPath volume's paths are: "/" (the default)
	// on a real host; the local cluster's nodes, which share one
	// filesystem, each have a directory of their own.
	HostRoot string
	// PodCgroup, when set, is the cgroup v2 directory every process of
	// every pod (containers and exec probes, host-network pods too)
	// starts in; New creates it. The local cluster gives each node one,
	// since its nodes share a kernel and its ebpf proxies attach their
	// socket programs to their own node's. Empty: the agent's own cgroup,
	// as on a real node, where the node's is the hierarchy's root.
	PodCgroup string
	// APIServer (host:port) is the KUBERNETES_SERVICE_HOST/PORT containers
	// get; empty: the kubernetes Service's ClusterIP, as with the kubelet.
	APIServer string
	Heartbeat time.Duration
	// KubeletAddress and KubeletPort: where container logs are served
	// (HTTPS, see server.go); port 0 serves nothing.
	KubeletAddress string
	KubeletPort    int
	// ClientCA (PEM) authenticates the API server on the kubelet port.
	ClientCA []byte
	// APIServerCA (PEM) is the ca.crt pods get with their service account
	// token, to check the API server's certificate (the CA the agent's
	// kubeconfig trusts); empty: no ca.crt.
	APIServerCA []byte
	Logger      *slog.Logger
}

// Agent runs the pods bound to one node.
type Agent struct {
	o   Options
	log *slog.Logger
	cni *cniRuntime
	// recorder is set by Run before any pod worker starts.
	recorder record.EventRecorder
	// kubelet is the open kubelet port (nil when not served).
	kubelet *kubeletServer

	mu    sync.Mutex
	pods  map[types.UID]*podWorker
	adopt map[types.UID]*sandboxState // recorded sandboxes at start

	// gcMu keeps CNI GC from running while a sandbox is being created (its
	// attachment is not yet in the live set).
	gcMu sync.RWMutex
}

// New checks the options.
func New(o Options) (*Agent, error) {
	if o.Client == nil || o.NodeName == "" || o.NodeIP == "" {
		return nil, errors.New("agent: Client, NodeName and NodeIP are required")
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, err
	}
	if o.PodCgroup != "" {
		if err := cgroup2.Ensure(o.PodCgroup); err != nil {
			return nil, fmt.Errorf("agent: pod cgroup: %w", err)
		}
	}
	return &Agent{o: o, log: o.Logger, pods: map[types.UID]*podWorker{},
		cni: &cniRuntime{confDir: o.CNIConfDir, binDirs: o.CNIBinDirs, cacheDir: o.CNICacheDir, exec: newNodeViewExec(shimCommand(o.Self), o.HostRoot)}}, nil
}

// proxyCommand is the command the image's nodenet-proxy path maps to:
// the nodenet-proxy next to Self, else `nodenet proxy` (see resolve).
func (a *Agent) proxyCommand() []string { return siblingCommand(a.o.Self, "nodenet-proxy", "proxy") }

// cniPlugin is the nodenet-cni binary the image's path maps to.
func (a *Agent) cniPlugin() string {
	if a.o.CNIPlugin == "" && a.o.Self != "" {
		return filepath.Join(filepath.Dir(a.o.Self), "nodenet-cni")
	}
	return a.o.CNIPlugin
}

// Run registers the node and runs pods until ctx ends. Pods keep running
// after it returns, as with the kubelet.
func (a *Agent) Run(ctx context.Context) error {
	ks, err := a.listenKubelet()
	if err != nil {
		return err
	}
	a.kubelet = ks
	if ks != nil {
		go a.serveKubelet(ctx, ks)
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	a.log.Info("node registered", "node", a.o.NodeName, "ip", a.o.NodeIP)
	stopEvents := a.startEvents(ctx)
	defer stopEvents()
	go a.heartbeat(ctx)
	adopted := a.loadState()
	factory := informers.NewSharedInformerFactoryWithOptions(a.o.Client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.o.NodeName).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.nudge(ctx, o) },
		UpdateFunc: func(_, o any) { a.nudge(ctx, o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				a.gone(p.UID)
			}
		},
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	go a.cleanupOrphans(ctx, inf.GetStore(), adopted)
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

func (a *Agent) nudge(ctx context.Context, o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	w := a.pods[p.UID]
	if w == nil {
		w = newPodWorker(a, p.UID)
		a.pods[p.UID] = w
		go w.run(ctx)
	}
	a.mu.Unlock()
	w.update(p.DeepCopy())
}

// gone handles a pod removed from the API (deleted with grace 0 by us or
// by someone else): whatever still runs is stopped.
func (a *Agent) gone(uid types.UID) {
	a.mu.Lock()
	w := a.pods[uid]
	a.mu.Unlock()
	if w != nil {
		w.update(nil)
	}
}

func (a *Agent) forget(uid types.UID) {
	a.mu.Lock()
	delete(a.pods, uid)
	a.mu.Unlock()
}

func (a *Agent) register(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.o.NodeName, Annotations: a.annotations(), Labels: map[string]string{
		"kubernetes.io/hostname":           a.o.NodeName,
		"kubernetes.io/os":                 "linux",
		"topology.kubernetes.io/zone":      a.o.Zone,
		"node.kubernetes.io/instance-type": "netns",
	}}}
	for {
		_, err := a.o.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = a.publishPin(ctx)
		}
		if err == nil {
			break
		}
		a.log.Warn("register node", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	_, _ = a.o.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1.NamespaceNodeLease}}, metav1.CreateOptions{})
	return a.updateNodeStatus(ctx)
}

func (a *Agent) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return a.tryUpdateNodeStatus(ctx) })
}

func (a *Agent) tryUpdateNodeStatus(ctx context.Context) error {
	n, err := a.o.Client.CoreV1().Nodes().Get(ctx, a.o.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node: %w", err)
	}
	now := metav1.Now()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.o.NodeIP}, {Type: corev1.NodeHostName, Address: a.o.NodeName}}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "nodenet agent is posting ready status", LastHeartbeatTime: now}
	if _, err := a.cni.confList(); err != nil {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "NetworkPluginNotReady", err.Error()
	}
	found := false
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready.LastTransitionTime = c.LastTransitionTime
			if c.Status != ready.Status {
				ready.LastTransitionTime = now
			}
			n.Status.Conditions[i], found = ready, true
		}
	}
	if !found {
		ready.LastTransitionTime = now
		n.Status.Conditions = append(n.Status.Conditions, ready)
	}
	a.setMachineStatus(n)
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 0
	if a.kubelet != nil {
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(a.kubelet.port)
	}
	_, err = a.o.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

func (a *Agent) heartbeat(ctx context.Context) {
	fast := time.NewTicker(time.Second)
	defer fast.Stop()
	last := time.Time{}
	wasReady := false
	for {
		_, err := a.cni.confList()
		netReady := err == nil
		if time.Since(last) >= a.o.Heartbeat || netReady != wasReady {
			if err := a.renewLease(ctx); err != nil {
				a.log.Warn("renew lease", "err", err)
			}
			if err := a.updateNodeStatus(ctx); err != nil {
				a.log.Warn("update node status", "err", err)
			} else {
				last, wasReady = time.Now(), netReady
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-fast.C:
		}
	}
}

func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.o.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, a.o.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.o.NodeName}, Spec: coordv1.LeaseSpec{
			HolderIdentity: ptr.To(a.o.NodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// statePath is where a pod's sandbox is recorded.
func (a *Agent) statePath(uid types.UID) string {
	return filepath.Join(a.o.StateDir, string(uid)+".json")
}

// annotations publish the kubelet port's certificate pin (server.go).
func (a *Agent) annotations() map[string]string {
	if a.kubelet == nil {
		return nil
	}
	return map[string]string{pki.KubeletServingCertAnnotation: a.kubelet.fingerprint}
}

// publishPin updates the pin on a node registered before (the serving
// certificate is re-issued when the node's IP changes); null removes it.
func (a *Agent) publishPin(ctx context.Context) error {
	pin := "null"
	if a.kubelet != nil {
		pin = strconv.Quote(a.kubelet.fingerprint)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, pki.KubeletServingCertAnnotation, pin)
	if _, err := a.o.Client.CoreV1().Nodes().Patch(ctx, a.o.NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("publish kubelet certificate pin: %w", err)
	}
	return nil
}
