package flanneld

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// Lease-mode object metadata.
const (
	// LabelSubnetLease marks the coordination Leases that hold subnets.
	LabelSubnetLease = "flannel.nodenet.io/subnet-lease"
	// AnnSubnet is the subnet a Lease holds (its name encodes it too).
	AnnSubnet = "flannel.nodenet.io/subnet"
)

// ErrLeaseLost means another node took our subnet over after our lease
// expired: the daemon must stop, because its routes and pods use a
// subnet that now belongs to someone else.
var ErrLeaseLost = errors.New("subnet lease lost")

// LeaseOptions configures lease mode.
type LeaseOptions struct {
	Namespace string
	// TTL is how long a lease lives without renewal; RenewMargin is how
	// long before expiry it is renewed.
	TTL, RenewMargin time.Duration
	// Previous are the subnets of the last run (from subnet.env), tried
	// first so that a restart keeps its subnet and its pods' addresses.
	Previous []netip.Prefix
}

// leaseManager is lease mode (--subnet-lease): the node claims a subnet of
// Network itself. Each claimed subnet is a coordination.k8s.io Lease named
// after the subnet (10.244.3.0-24), so the API server's create is the
// atomic claim and two nodes can never hold one subnet. An expired lease is
// taken over with an update conditioned on its resourceVersion, which
// fails for everyone but one claimant.
type leaseManager struct {
	client kubernetes.Interface
	holder string
	cfg    *Config
	opts   LeaseOptions
	notify func()
	log    *slog.Logger
	now    func() time.Time

	factory informers.SharedInformerFactory
	cancel  context.CancelFunc
	leases  coordlisters.LeaseNamespaceLister

	mu    sync.Mutex
	held  map[bool]*coordv1.Lease // by is4
	attrs LocalAttrs              // what Acquire published, renewed with the lease
}

func newLeaseManager(client kubernetes.Interface, holder string, cfg *Config, opts LeaseOptions, notify func(), log *slog.Logger) *leaseManager {
	if opts.Namespace == "" {
		opts.Namespace = "kube-system"
	}
	if opts.TTL <= 0 {
		opts.TTL = 24 * time.Hour
	}
	if opts.RenewMargin <= 0 || opts.RenewMargin >= opts.TTL {
		opts.RenewMargin = opts.TTL / 2
	}
	return &leaseManager{client: client, holder: holder, cfg: cfg, opts: opts, notify: notify, log: log,
		now: time.Now, held: map[bool]*coordv1.Lease{}}
}

var leaseSelector = labels.SelectorFromSet(labels.Set{LabelSubnetLease: "true"})

// Start runs the lease informer and returns once it has synced.
func (m *leaseManager) Start(ctx context.Context) error {
	m.factory = informers.NewSharedInformerFactoryWithOptions(m.client, 5*time.Minute,
		informers.WithNamespace(m.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = leaseSelector.String() }))
	inf := m.factory.Coordination().V1().Leases()
	m.leases = inf.Lister().Leases(m.opts.Namespace)
	nudge := func(any) { m.notify() }
	reg, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: nudge, UpdateFunc: func(_, o any) { m.notify() }, DeleteFunc: nudge,
	})
	if err != nil {
		return fmt.Errorf("register lease handlers: %w", err)
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("wait for lease informer to sync: %w", context.Cause(ctx))
	}
	return nil
}

// Stop shuts the informers down.
func (m *leaseManager) Stop() {
	if m.factory != nil {
		m.cancel()
		m.factory.Shutdown()
	}
}

// Self returns the backend data our leases carried last time.
func (m *leaseManager) Self() selfInfo {
	var s selfInfo
	if m.leases == nil {
		return s
	}
	ls, _ := m.leases.List(leaseSelector)
	for _, l := range ls {
		if holderOf(l) != m.holder {
			continue
		}
		if d := l.Annotations[AnnBackendData]; d != "" {
			s.BackendData = json.RawMessage(d)
		}
		if d := l.Annotations[AnnBackendV6Data]; d != "" {
			s.BackendV6Data = json.RawMessage(d)
		}
	}
	return s
}

// Acquire claims a subnet per enabled family and returns our lease.
func (m *leaseManager) Acquire(ctx context.Context, attrs LocalAttrs, waiting func(string)) (Lease, error) {
	if err := m.ensureNamespace(ctx); err != nil {
		return Lease{}, err
	}
	l := Lease{Node: m.holder, PublicIP: attrs.PublicIP, PublicIPv6: attrs.PublicIPv6, BackendType: attrs.BackendType,
		BackendData: attrs.BackendData, BackendV6Data: attrs.BackendV6Data}
	m.mu.Lock()
	m.attrs = attrs
	m.mu.Unlock()
	for _, f := range m.families() {
		obj, err := m.acquireFamily(ctx, f, attrs, waiting)
		if err != nil {
			return Lease{}, err
		}
		m.mu.Lock()
		m.held[f.is4] = obj
		m.mu.Unlock()
		sn, _ := netip.ParsePrefix(obj.Annotations[AnnSubnet])
		if f.is4 {
			l.Subnet = sn
		} else {
			l.IPv6Subnet = sn
		}
	}
	return l, nil
}

// leaseFamily is one enabled family's subnet space.
type leaseFamily struct {
	is4      bool
	network  netip.Prefix
	bits     int
	min, max netip.Addr
}

func (f leaseFamily) valid(p netip.Prefix) bool {
	return p.IsValid() && p.Bits() == f.bits && p == p.Masked() && f.network.Contains(p.Addr()) &&
		!p.Addr().Less(f.min) && !f.max.Less(p.Addr())
}

func (m *leaseManager) families() []leaseFamily {
	var out []leaseFamily
	if m.cfg.EnableIPv4 {
		out = append(out, leaseFamily{true, m.cfg.Network, m.cfg.SubnetLen, m.cfg.SubnetMin, m.cfg.SubnetMax})
	}
	if m.cfg.EnableIPv6 {
		out = append(out, leaseFamily{false, m.cfg.IPv6Network, m.cfg.IPv6SubnetLen, m.cfg.IPv6SubnetMin, m.cfg.IPv6SubnetMax})
	}
	return out
}

func (m *leaseManager) ensureNamespace(ctx context.Context) error {
	_, err := m.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.opts.Namespace}}, metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) {
		return nil // forbidden: RBAC lets us use the namespace, not create it
	}
	return fmt.Errorf("create lease namespace %s: %w", m.opts.Namespace, err)
}

// acquireFamily claims one subnet: ours from before (a lease we hold, then
// subnet.env), else a random free one, else an expired one.
func (m *leaseManager) acquireFamily(ctx context.Context, f leaseFamily, attrs LocalAttrs, waiting func(string)) (*coordv1.Lease, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		list, err := m.client.CoordinationV1().Leases(m.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: leaseSelector.String()})
		if err != nil {
			return nil, fmt.Errorf("list subnet leases in %s: %w", m.opts.Namespace, err)
		}
		obj, wait, err := m.claimOnce(ctx, f, attrs, list.Items)
		if err != nil || obj != nil {
			return obj, err
		}
		if wait > 0 {
			msg := fmt.Sprintf("no free /%d in %s: waiting %v for a lease to expire", f.bits, f.network, wait.Round(time.Millisecond))
			if attempt == 0 {
				m.log.Warn(msg)
			}
			waiting(msg)
		} else {
			// Lost every race this round: back off a little, with jitter,
			// so that a crowd of claimants spreads out.
			wait = time.Duration(rand.Int64N(int64(50*time.Millisecond))) + 10*time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(wait):
		}
	}
}

// claimOnce makes one round of claims against a listing. It returns the
// claimed lease, or how long to wait before the next round (0: retry soon).
func (m *leaseManager) claimOnce(ctx context.Context, f leaseFamily, attrs LocalAttrs, items []coordv1.Lease) (*coordv1.Lease, time.Duration, error) {
	now := m.now()
	byName := make(map[string]*coordv1.Lease, len(items))
	var mine, expired []*coordv1.Lease
	for i := range items {
		l := &items[i]
		sn, err := netip.ParsePrefix(l.Annotations[AnnSubnet])
		if err != nil || sn.Addr().Is4() != f.is4 {
			continue
		}
		byName[l.Name] = l
		switch {
		case holderOf(l) == m.holder && f.valid(sn):
			mine = append(mine, l)
		case m.expired(l, now) && f.valid(sn):
			expired = append(expired, l)
		}
	}
	// 1. A lease we already hold (a restart): renew the first, release
	// any others (left by a crash mid-claim or a changed config).
	for i, l := range mine {
		if i > 0 {
			m.release(ctx, l)
			continue
		}
		obj, err := m.update(ctx, l, attrs, false)
		if err == nil || !apierrors.IsConflict(err) {
			return obj, 0, err
		}
		return nil, 0, nil
	}
	// 2. The subnet of our last run.
	for _, p := range m.opts.Previous {
		if !f.valid(p) {
			continue
		}
		name := leaseName(p)
		if cur, ok := byName[name]; !ok {
			if obj, err := m.create(ctx, p, attrs); err == nil || !apierrors.IsAlreadyExists(err) {
				return obj, 0, err
			}
		} else if m.expired(cur, now) {
			if obj, err := m.update(ctx, cur, attrs, true); err == nil || !apierrors.IsConflict(err) {
				return obj, 0, err
			}
		}
	}
	// 3. A free subnet, picked at random so that racing nodes rarely
	// collide; a collision is an AlreadyExists and the next pick.
	for _, p := range freeCandidates(f, byName, 8) {
		obj, err := m.create(ctx, p, attrs)
		if err == nil {
			return obj, 0, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, 0, err
		}
	}
	// 4. Reclaim an expired lease.
	rand.Shuffle(len(expired), func(i, j int) { expired[i], expired[j] = expired[j], expired[i] })
	for _, l := range expired {
		obj, err := m.update(ctx, l, attrs, true)
		if err == nil {
			m.log.Info("reclaimed expired subnet lease", "subnet", l.Annotations[AnnSubnet], "previousHolder", holderOf(l))
			return obj, 0, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, 0, err
		}
	}
	if len(byName) < subnetCount(f) {
		return nil, 0, nil // lost races: free subnets remain
	}
	// Full: wait for the earliest expiry.
	wait := 2 * time.Second
	for _, l := range byName {
		if d := m.expiry(l).Sub(now); d > 0 && d < wait {
			wait = d
		}
	}
	return nil, wait + 10*time.Millisecond, nil
}

func (m *leaseManager) expiry(l *coordv1.Lease) time.Time {
	t := l.CreationTimestamp.Time
	if l.Spec.RenewTime != nil {
		t = l.Spec.RenewTime.Time
	} else if l.Spec.AcquireTime != nil {
		t = l.Spec.AcquireTime.Time
	}
	d := m.opts.TTL
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return t.Add(d)
}

func (m *leaseManager) expired(l *coordv1.Lease, now time.Time) bool { return now.After(m.expiry(l)) }

func holderOf(l *coordv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaseName encodes a subnet as a DNS subdomain, as upstream's etcd keys
// do: 10.244.3.0/24 → 10.244.3.0-24, fd00::/64 → fd00---64.
func leaseName(p netip.Prefix) string {
	return strings.ReplaceAll(p.Addr().String(), ":", "-") + fmt.Sprintf("-%d", p.Bits())
}

func (m *leaseManager) ttlSeconds() *int32 {
	s := int32((m.opts.TTL + time.Second - 1) / time.Second)
	return &s
}

func (m *leaseManager) annotate(obj *coordv1.Lease, sn netip.Prefix, attrs LocalAttrs) {
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[AnnSubnet] = sn.String()
	obj.Annotations[AnnBackendType] = attrs.BackendType
	if sn.Addr().Is4() {
		obj.Annotations[AnnPublicIP] = attrs.PublicIP.String()
		obj.Annotations[AnnBackendData] = rawOrNull(attrs.BackendData)
	} else {
		obj.Annotations[AnnPublicIPv6] = attrs.PublicIPv6.String()
		obj.Annotations[AnnBackendV6Data] = rawOrNull(attrs.BackendV6Data)
	}
}

func rawOrNull(r json.RawMessage) string {
	if len(r) == 0 {
		return "null"
	}
	return string(r)
}

func (m *leaseManager) create(ctx context.Context, sn netip.Prefix, attrs LocalAttrs) (*coordv1.Lease, error) {
	now := metav1.NewMicroTime(m.now())
	holder := m.holder
	obj := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName(sn), Namespace: m.opts.Namespace, Labels: map[string]string{LabelSubnetLease: "true"}},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: m.ttlSeconds(), AcquireTime: &now, RenewTime: &now},
	}
	m.annotate(obj, sn, attrs)
	out, err := m.client.CoordinationV1().Leases(m.opts.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("claim subnet %s: %w", sn, err)
	}
	m.log.Info("claimed subnet", "subnet", sn, "lease", m.opts.Namespace+"/"+out.Name)
	return out, nil
}

// update renews (or, with takeover, claims) l; it fails with a Conflict
// when l changed since it was read.
func (m *leaseManager) update(ctx context.Context, l *coordv1.Lease, attrs LocalAttrs, takeover bool) (*coordv1.Lease, error) {
	obj := l.DeepCopy()
	now := metav1.NewMicroTime(m.now())
	holder := m.holder
	obj.Spec.HolderIdentity, obj.Spec.RenewTime, obj.Spec.LeaseDurationSeconds = &holder, &now, m.ttlSeconds()
	if takeover {
		obj.Spec.AcquireTime = &now
		transitions := int32(0)
		if obj.Spec.LeaseTransitions != nil {
			transitions = *obj.Spec.LeaseTransitions
		}
		transitions++
		obj.Spec.LeaseTransitions = &transitions
	}
	sn, _ := netip.ParsePrefix(obj.Annotations[AnnSubnet])
	m.annotate(obj, sn, attrs)
	out, err := m.client.CoordinationV1().Leases(m.opts.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("renew subnet lease %s: %w", l.Name, err)
	}
	return out, nil
}

func (m *leaseManager) release(ctx context.Context, l *coordv1.Lease) {
	uid, rv := l.UID, l.ResourceVersion
	err := m.client.CoordinationV1().Leases(m.opts.Namespace).Delete(ctx, l.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		m.log.Warn("release surplus subnet lease", "lease", l.Name, "err", err)
	}
}

// freeCandidates returns up to n random subnets in f not in used.
func freeCandidates(f leaseFamily, used map[string]*coordv1.Lease, n int) []netip.Prefix {
	lo := subnetIndex(f.network, f.bits, f.min)
	hi := subnetIndex(f.network, f.bits, f.max)
	span := new(big.Int).Sub(hi, lo)
	span.Add(span, big.NewInt(1))
	var out []netip.Prefix
	if span.IsInt64() && span.Int64() <= 1<<16 {
		var free []netip.Prefix
		for i := int64(0); i < span.Int64(); i++ {
			p := subnetAt(f.network, f.bits, new(big.Int).Add(lo, big.NewInt(i)))
			if used[leaseName(p)] == nil {
				free = append(free, p)
			}
		}
		rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
		return free[:min(n, len(free))]
	}
	// A huge space (IPv6): random probes are as good as a scan.
	for tries := 0; len(out) < n && tries < 16*n; tries++ {
		off, err := crand.Int(crand.Reader, span)
		if err != nil {
			break
		}
		p := subnetAt(f.network, f.bits, off.Add(off, lo))
		if used[leaseName(p)] == nil {
			out = append(out, p)
		}
	}
	return out
}

func subnetCount(f leaseFamily) int {
	span := new(big.Int).Sub(subnetIndex(f.network, f.bits, f.max), subnetIndex(f.network, f.bits, f.min))
	if !span.IsInt64() || span.Int64() > 1<<30 {
		return 1 << 30
	}
	return int(span.Int64()) + 1
}

// Peers returns the unexpired leases of other holders, merged per holder.
func (m *leaseManager) Peers() []Lease {
	ls, err := m.leases.List(leaseSelector)
	if err != nil {
		return nil
	}
	now := m.now()
	byHolder := map[string]*Lease{}
	for _, l := range ls {
		h := holderOf(l)
		if h == "" || h == m.holder || m.expired(l, now) {
			continue
		}
		sn, err := netip.ParsePrefix(l.Annotations[AnnSubnet])
		if err != nil {
			continue
		}
		p := byHolder[h]
		if p == nil {
			p = &Lease{Node: h}
			byHolder[h] = p
		}
		q, ok, err := leaseFromAnnotations(*p, l.Annotations)
		if err != nil || !ok {
			continue
		}
		if sn.Addr().Is4() {
			q.Subnet = sn
		} else {
			q.IPv6Subnet = sn
		}
		*p = q
	}
	out := make([]Lease, 0, len(byHolder))
	for _, p := range byHolder {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Keep renews our leases every TTL−RenewMargin until ctx ends; it
// returns ErrLeaseLost if one was taken over. A failed renewal is retried
// every second: the lease is still ours until it expires.
func (m *leaseManager) Keep(ctx context.Context) error {
	m.mu.Lock()
	attrs := m.attrs
	m.mu.Unlock()
	every := m.opts.TTL - m.opts.RenewMargin
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		next := every
		if err := m.renewAll(ctx, attrs); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				return err
			}
			m.log.Warn("renew subnet lease", "err", err)
			next = min(time.Second, every)
		}
		timer.Reset(next)
	}
}

func (m *leaseManager) renewAll(ctx context.Context, attrs LocalAttrs) error {
	m.mu.Lock()
	held := make([]*coordv1.Lease, 0, len(m.held))
	for _, l := range m.held {
		held = append(held, l)
	}
	m.mu.Unlock()
	for _, l := range held {
		out, err := m.update(ctx, l, attrs, false)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			cur, gerr := m.client.CoordinationV1().Leases(m.opts.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(gerr):
				return fmt.Errorf("%w: %s was deleted", ErrLeaseLost, l.Name)
			case gerr != nil:
				return gerr
			case holderOf(cur) != m.holder:
				return fmt.Errorf("%w: %s is now held by %s", ErrLeaseLost, l.Name, holderOf(cur))
			}
			out, err = m.update(ctx, cur, attrs, false)
		}
		if err != nil {
			return err
		}
		sn, _ := netip.ParsePrefix(out.Annotations[AnnSubnet])
		m.mu.Lock()
		m.held[sn.Addr().Is4()] = out
		m.mu.Unlock()
	}
	return nil
}

// Complete sets NodeNetworkUnavailable=False when a Node of our name
// exists; lease mode works without Node objects too.
func (m *leaseManager) Complete(ctx context.Context) error {
	err := setNetworkAvailable(ctx, m.client, m.holder)
	if apierrors.IsNotFound(errors.Unwrap(err)) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
