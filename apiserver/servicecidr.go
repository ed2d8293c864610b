package apiserver

// networking.k8s.io/v1 ServiceCIDR and IPAddress, as kube-apiserver 1.33+
// serves them. kube-proxy (both modes) watches ServiceCIDRs, and its
// nftables mode builds its "drop traffic to unallocated ClusterIPs" rule
// from them; IPAddresses are how upstream shows which ClusterIP belongs to
// which Service.
//
// What this server supports, and why:
//
//   - One ServiceCIDR, "kubernetes", mirrors --service-cluster-ip-range
//     (both families when dual-stack). The server writes it on every start,
//     so it always says where ClusterIPs really come from. Creating more
//     ServiceCIDRs is refused (403 with the reason): the allocator hands out
//     addresses from its flags only, and a ServiceCIDR that was accepted but
//     never used would silently lie to kube-proxy. Changing spec.cidrs or
//     deleting the default one is refused for the same reason; labels,
//     annotations and status may be updated as upstream allows.
//   - IPAddresses are the allocator's records, read-only through the API
//     (get, list, watch): each one is written in the same etcd transaction
//     as the Service that claims the address, and removed in the one that
//     releases it, so they can never disagree with Services. Upstream lets
//     users create IPAddresses to reserve addresses; here that would need a
//     second kind of claim holder, so writes answer 405 saying so.
//   - repairIPAddresses converges IPAddresses with the Services' claims at
//     start (data written before IPAddresses existed, or etcd edited by
//     hand) and every minute after.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/apiserver/validation"
)

const (
	// defaultServiceCIDR is the name upstream gives the ServiceCIDR built
	// from --service-cluster-ip-range.
	defaultServiceCIDR = "kubernetes"
	// serviceCIDRFinalizer is what upstream's servicecidrs controller puts
	// on every ServiceCIDR; kept so the object looks as clients expect.
	serviceCIDRFinalizer = "networking.k8s.io/service-cidr-finalizer"
	// ipAllocatorName is the managed-by value of upstream's ClusterIP
	// allocator; this server plays that part.
	ipAllocatorName = "ipallocator.k8s.io"
)

var (
	verbsReadOnly    = metav1.Verbs{"get", "list", "watch"}
	verbsServiceCIDR = metav1.Verbs{"get", "list", "watch", "update", "patch"}
)

// upstreamCompatResources are resources served for upstream clients
// (kube-proxy, kubectl, tools reading Endpoints) beyond what nodenet's own
// components need.
func upstreamCompatResources() []*resource {
	return []*resource{
		{
			gv: networkingV1, plural: "servicecidrs", singular: "servicecidr", kind: "ServiceCIDR",
			hasStatus:     true,
			newObj:        func() runtime.Object { return &networkingv1.ServiceCIDR{} },
			newList:       func() runtime.Object { return &networkingv1.ServiceCIDRList{} },
			prepareCreate: resetStatus,
			validate:      typed(validation.ServiceCIDR), validateUpd: typed2(validation.ServiceCIDRUpdate),
			validateStat: typed2(validation.ServiceCIDRStatusUpdate),
			verbs:        verbsServiceCIDR,
			refuse:       refuseServiceCIDRWrites,
			columns:      serviceCIDRColumns,
		},
		{
			gv: networkingV1, plural: "ipaddresses", singular: "ipaddress", kind: "IPAddress", shortNames: []string{"ip"},
			newObj:   func() runtime.Object { return &networkingv1.IPAddress{} },
			newList:  func() runtime.Object { return &networkingv1.IPAddressList{} },
			validate: typed(validation.IPAddress),
			verbs:    verbsReadOnly,
			refuse:   refuseIPAddressWrites,
			columns:  ipAddressColumns,
		},
		endpointsResource(),
	}
}

// requestVerb names a request the way authorization does.
func requestVerb(method string, req *apiRequest, isWatch bool) string {
	switch method {
	case http.MethodGet:
		switch {
		case isWatch:
			return "watch"
		case req.name == "":
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if req.name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(method)
}

func (r *resource) discoveryVerbs() metav1.Verbs {
	if r.verbs != nil {
		return r.verbs
	}
	return verbsAll
}

func refuseServiceCIDRWrites(verb string, req *apiRequest) error {
	switch verb {
	case "create":
		return apierrors.NewForbidden(req.gr(), req.name, errors.New(
			"this API server allocates ClusterIPs only from the default ServiceCIDR \"kubernetes\", which follows --service-cluster-ip-range; "+
				"extra ServiceCIDRs are not supported (restart the server with a wider range instead)"))
	case "delete", "deletecollection":
		return apierrors.NewForbidden(req.gr(), req.name, errors.New(
			"the default ServiceCIDR \"kubernetes\" follows --service-cluster-ip-range and cannot be deleted"))
	}
	return nil
}

func refuseIPAddressWrites(verb string, req *apiRequest) error {
	if verb == "get" || verb == "list" || verb == "watch" {
		return nil
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Message: fmt.Sprintf("%s is not supported on ipaddresses: IPAddresses are the ClusterIP allocator's records and change only with their Service "+
			"(create or delete the Service to allocate or free an address)", verb),
		Details: &metav1.StatusDetails{Group: req.res.gv.Group, Kind: req.res.plural, Name: req.name},
	}}
}

func serviceCIDRColumns() []column {
	return []column{nameCol(),
		{name: "CIDRs", typ: "string", cell: func(o runtime.Object) any {
			return strings.Join(o.(*networkingv1.ServiceCIDR).Spec.CIDRs, ",")
		}},
		ageCol(),
	}
}

func ipAddressColumns() []column {
	return []column{nameCol(),
		{name: "ParentRef", typ: "string", cell: func(o runtime.Object) any {
			ref := o.(*networkingv1.IPAddress).Spec.ParentRef
			if ref == nil {
				return "<none>"
			}
			s := ref.Resource
			if ref.Group != "" {
				s += "." + ref.Group
			}
			if ref.Namespace != "" {
				s += "/" + ref.Namespace
			}
			return s + "/" + ref.Name
		}},
		ageCol(),
	}
}

// convergeServiceCIDR makes the default ServiceCIDR match the allocator's
// ranges, with the Ready condition and finalizer upstream's controllers
// set. The API refuses spec changes, so this writes to the store directly.
func (s *Server) convergeServiceCIDR(ctx context.Context) error {
	res := s.byGV[networkingV1]["servicecidrs"]
	want := s.services.cidrs()
	req := &apiRequest{res: res, name: defaultServiceCIDR}
	for attempt := 0; ; attempt++ {
		cur, err := res.store.Get(ctx, req.key())
		if errors.Is(err, storage.ErrNotFound) {
			obj := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: defaultServiceCIDR}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: want}}
			cur, err = s.createObject(ctx, req, obj, false)
			if apierrors.IsAlreadyExists(err) && attempt < 5 {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("read the default ServiceCIDR: %w", err)
		}
		next := cur.DeepCopyObject().(*networkingv1.ServiceCIDR)
		if !slices.Equal(next.Spec.CIDRs, want) {
			s.log.Info("default ServiceCIDR follows --service-cluster-ip-range", "from", next.Spec.CIDRs, "to", want)
			next.Spec.CIDRs = want
			next.Generation++
		}
		if !slices.Contains(next.Finalizers, serviceCIDRFinalizer) {
			next.Finalizers = append(next.Finalizers, serviceCIDRFinalizer)
		}
		apimeta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
			Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue,
			Message: "Kubernetes Service CIDR is ready", ObservedGeneration: next.Generation,
		})
		if apiequality.Semantic.DeepEqual(next, cur) {
			return nil
		}
		rev, _ := strconv.ParseInt(next.ResourceVersion, 10, 64)
		_, err = res.store.Update(ctx, req.key(), rev, next, storage.Claims{})
		if errors.Is(err, storage.ErrConflict) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("update the default ServiceCIDR: %w", err)
		}
		return nil
	}
}

// cidrs lists the ranges, primary family first, as ServiceCIDR spells them.
func (a *serviceAllocator) cidrs() []string {
	out := []string{a.ranges[a.primary].Prefix().String()}
	for fam, r := range a.ranges {
		if fam != a.primary {
			out = append(out, r.Prefix().String())
		}
	}
	return out
}

// wireIPAddresses tells the allocator where IPAddress objects live, so it
// claims one beside each ClusterIP; called once the stores exist.
func (s *Server) wireIPAddresses() {
	s.services.ipObjects = s.byGV[networkingV1]["ipaddresses"].store
}

// ipAddressObject is the IPAddress recording that owner ("ns/name") holds ip.
func ipAddressObject(ip, owner string) *networkingv1.IPAddress {
	ns, name, _ := strings.Cut(owner, "/")
	fam := "IPv4"
	if addr, err := netip.ParseAddr(ip); err == nil && addr.Is6() {
		fam = "IPv6"
	}
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ip, UID: uuid.NewUUID(), CreationTimestamp: metav1.Now(),
			Labels: map[string]string{networkingv1.LabelIPAddressFamily: fam, networkingv1.LabelManagedBy: ipAllocatorName},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: name}},
	}
}

// ipAddressClaims adds to keys (claim key → value) the IPAddress object of
// every ClusterIP claim, so both are written and removed together.
func (a *serviceAllocator) ipAddressClaims(keys map[string]string) {
	if a.ipObjects == nil {
		return
	}
	for k, owner := range keys {
		ip, ok := strings.CutPrefix(k, serviceIPKeys)
		if !ok {
			continue
		}
		data, err := a.ipObjects.Encode(ipAddressObject(ip, owner))
		if err != nil {
			continue // cannot happen for this plain struct; repair would add it
		}
		keys[a.ipObjects.Key("", ip)] = string(data)
	}
}

// ipFromClaim maps an IPAddress object key to the address it records.
func (a *serviceAllocator) ipFromClaim(key string) (string, bool) {
	if a.ipObjects == nil {
		return "", false
	}
	return strings.CutPrefix(key, a.ipObjects.Prefix())
}

// repairIPAddresses makes the IPAddress objects match the ClusterIP claims
// in etcd: one per claim, owned by the claim's Service. Every write is a
// transaction guarded by both keys, so it never races a Service write (a
// guard that fails means a Service write got there first, and those keep
// both keys in step themselves).
func (s *Server) repairIPAddresses(ctx context.Context) error {
	store := s.services.ipObjects
	claims, err := s.client.Get(ctx, serviceIPKeys, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read ClusterIP claims: %w", err)
	}
	objs, err := s.client.Get(ctx, store.Prefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read IPAddresses: %w", err)
	}
	owners := map[string]string{}   // ip → "ns/name"
	claimRevs := map[string]int64{} // ip → mod revision of its claim
	objRevs := map[string]int64{}   // ip → mod revision of its IPAddress, 0 if none
	for _, c := range claims.Kvs {
		ip := strings.TrimPrefix(string(c.Key), serviceIPKeys)
		owners[ip], claimRevs[ip] = string(c.Value), c.ModRevision
	}
	var errs []error
	fixed := 0
	write := func(ip string, op clientv3.Op) {
		key := store.Key("", ip)
		guards := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(serviceIPKeys+ip), "=", claimRevs[ip]),
			clientv3.Compare(clientv3.ModRevision(key), "=", objRevs[ip]),
		}
		if _, err := s.client.Txn(ctx).If(guards...).Then(op).Commit(); err != nil {
			errs = append(errs, fmt.Errorf("repair IPAddress %s: %w", ip, err))
		}
		fixed++
	}
	put := func(ip string) {
		data, err := store.Encode(ipAddressObject(ip, owners[ip]))
		if err != nil {
			errs = append(errs, err)
			return
		}
		write(ip, clientv3.OpPut(store.Key("", ip), string(data)))
	}
	for _, o := range objs.Kvs {
		ip := strings.TrimPrefix(string(o.Key), store.Prefix())
		objRevs[ip] = o.ModRevision
		obj, err := store.Decode(o.Value, o.ModRevision)
		a, _ := obj.(*networkingv1.IPAddress)
		switch {
		case owners[ip] == "":
			write(ip, clientv3.OpDelete(string(o.Key)))
		case err != nil || a.Spec.ParentRef == nil || a.Spec.ParentRef.Namespace+"/"+a.Spec.ParentRef.Name != owners[ip]:
			put(ip)
		}
	}
	for ip := range owners {
		if objRevs[ip] == 0 {
			put(ip)
		}
	}
	if fixed > 0 {
		s.log.Info("IPAddresses repaired to match ClusterIP claims", "changes", fixed)
	}
	return errors.Join(errs...)
}
