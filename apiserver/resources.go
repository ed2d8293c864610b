package apiserver

import (
	"reflect"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodenet/nodenet/apiserver/defaulting"
	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/apiserver/validation"
)

// resource describes one served resource: its names, how objects of it are
// defaulted and validated, and where they live.
type resource struct {
	gv         schema.GroupVersion
	plural     string
	singular   string
	kind       string
	shortNames []string
	categories []string
	namespaced bool
	hasStatus  bool
	newObj     func() runtime.Object
	newList    func() runtime.Object

	// defaults fills in what kube-apiserver would default (create and update).
	defaults func(runtime.Object)
	// prepareCreate clears what a client may not set on create (often status).
	prepareCreate func(runtime.Object)
	validate      func(obj runtime.Object) field.ErrorList
	validateUpd   func(obj, old runtime.Object) field.ErrorList
	validateStat  func(obj, old runtime.Object) field.ErrorList
	// prepareStatus, when set, resets more than the spec on a status update
	// (what kube-apiserver's status strategy of the kind resets).
	prepareStatus func(obj, old runtime.Object)
	// prepareUpdate, when set, is the rest of kube-apiserver's update
	// strategy of the kind, run on the defaulted object of a main-resource
	// update (not a status update).
	prepareUpdate func(obj, old runtime.Object)
	// fieldSet lists the fields a fieldSelector may use, beyond metadata.
	fieldSet func(obj runtime.Object) fields.Set
	// claims, when set, allocates values kept in the same transaction.
	claims claimer
	// gracePeriod, when set, returns the grace period a delete should wait.
	gracePeriod func(obj runtime.Object, requested *int64) int64
	// createOnUpdate lets PUT create a missing object (as for events).
	createOnUpdate bool
	// verbs, when set, replaces the full verb list in discovery; refuse
	// then turns the other verbs away with an error saying why.
	verbs  metav1.Verbs
	refuse func(verb string, req *apiRequest) error
	// columns, when set, are the kubectl get columns.
	columns func() []column

	// storedAs, when set, is the resource whose stored objects this one
	// serves in another shape (events.k8s.io/v1 Events are core/v1 Events):
	// the two share store and cache, toStored and fromStored convert at the
	// edges, and fieldSet reads stored objects.
	storedAs   *resource
	toStored   func(runtime.Object) runtime.Object
	fromStored func(runtime.Object) runtime.Object

	store *storage.Store
	cache *storage.Cache
}

// in turns an object of this resource into its stored form.
func (r *resource) in(obj runtime.Object) runtime.Object {
	if r.toStored == nil {
		return obj
	}
	return r.toStored(obj)
}

// out turns a stored object into this resource's form.
func (r *resource) out(obj runtime.Object) runtime.Object {
	if r.fromStored == nil {
		return obj
	}
	return r.fromStored(obj)
}

// stored is the resource whose objects are in storage for this one.
func (r *resource) stored() *resource {
	if r.storedAs != nil {
		return r.storedAs
	}
	return r
}

// tracksGeneration: objects with a spec/status split count spec changes in
// metadata.generation, as kube-apiserver does for pods and services, and so
// do EndpointSlices (their controllers compare generations).
func (r *resource) tracksGeneration() bool {
	return (r.hasStatus && r.kind != "Namespace" && r.kind != "Node") || r.kind == "EndpointSlice"
}

func (r *resource) gvk() schema.GroupVersionKind { return r.gv.WithKind(r.kind) }

func (r *resource) listGVK() schema.GroupVersionKind { return r.gv.WithKind(r.kind + "List") }

// groupPath is the URL prefix of the resource's group version.
func (r *resource) groupPath() string {
	if r.gv.Group == "" {
		return "/api/" + r.gv.Version
	}
	return "/apis/" + r.gv.Group + "/" + r.gv.Version
}

// typed adapts a typed function to runtime.Object.
func typed[T runtime.Object](f func(T) field.ErrorList) func(runtime.Object) field.ErrorList {
	return func(o runtime.Object) field.ErrorList { return f(o.(T)) }
}

func typed2[T runtime.Object](f func(T, T) field.ErrorList) func(runtime.Object, runtime.Object) field.ErrorList {
	return func(o, old runtime.Object) field.ErrorList { return f(o.(T), old.(T)) }
}

func typedDefault[T runtime.Object](f func(T)) func(runtime.Object) {
	return func(o runtime.Object) { f(o.(T)) }
}

// resetStatus zeroes the Status field: clients set status only through the
// status subresource.
func resetStatus(obj runtime.Object) {
	v := reflect.ValueOf(obj).Elem().FieldByName("Status")
	if v.IsValid() {
		v.Set(reflect.Zero(v.Type()))
	}
}

// copyStatus sets dst.Status = src.Status.
func copyStatus(dst, src runtime.Object) {
	d := reflect.ValueOf(dst).Elem().FieldByName("Status")
	if d.IsValid() {
		d.Set(reflect.ValueOf(src).Elem().FieldByName("Status"))
	}
}

// specFields calls f with each field of a and b (objects of one kind) but
// metadata and status, until f returns false.
func specFields(a, b runtime.Object, f func(x, y reflect.Value) bool) {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !f(va.Field(i), vb.Field(i)) {
			return
		}
	}
}

// keepSpec sets every field of dst but metadata and status to src's: what a
// status update may not change.
func keepSpec(dst, src runtime.Object) {
	specFields(dst, src, func(d, s reflect.Value) bool { d.Set(s); return true })
}

// specChanged reports whether anything but metadata and status differs; that
// is what bumps metadata.generation.
func specChanged(obj, old runtime.Object) bool {
	changed := false
	specFields(obj, old, func(a, b reflect.Value) bool {
		changed = !apiequality.Semantic.DeepEqual(a.Interface(), b.Interface())
		return !changed
	})
	return changed
}

var (
	coreV1        = schema.GroupVersion{Version: "v1"}
	networkingV1  = networkingv1.SchemeGroupVersion
	discoveryV1   = discoveryv1.SchemeGroupVersion
	coordinatinV1 = coordinationv1.SchemeGroupVersion
	eventsV1      = eventsv1.SchemeGroupVersion
)

// newResources returns the served resources, in discovery order.
func newResources(svc claimer) []*resource {
	coreEvents := &resource{
		gv: coreV1, plural: "events", singular: "event", kind: "Event", shortNames: []string{"ev"},
		namespaced: true, createOnUpdate: true,
		newObj:   func() runtime.Object { return &corev1.Event{} },
		newList:  func() runtime.Object { return &corev1.EventList{} },
		validate: typed(validation.CoreEvent), validateUpd: typed2(validation.CoreEventUpdate),
		fieldSet: coreEventFields,
	}
	return append([]*resource{
		{
			gv: coreV1, plural: "namespaces", singular: "namespace", kind: "Namespace", shortNames: []string{"ns"},
			hasStatus: true,
			newObj:    func() runtime.Object { return &corev1.Namespace{} },
			newList:   func() runtime.Object { return &corev1.NamespaceList{} },
			defaults:  typedDefault(defaulting.Namespace),
			validate:  typed(validation.Namespace), validateUpd: typed2(validation.NamespaceUpdate),
			validateStat: typed2(validation.NamespaceUpdate),
			fieldSet: func(o runtime.Object) fields.Set {
				return fields.Set{"status.phase": string(o.(*corev1.Namespace).Status.Phase)}
			},
		},
		{
			gv: coreV1, plural: "nodes", singular: "node", kind: "Node", shortNames: []string{"no"},
			hasStatus: true,
			newObj:    func() runtime.Object { return &corev1.Node{} },
			newList:   func() runtime.Object { return &corev1.NodeList{} },
			defaults:  typedDefault(defaulting.Node),
			validate:  typed(validation.Node), validateUpd: typed2(validation.NodeUpdate),
			validateStat: typed2(validation.NodeUpdate),
			fieldSet: func(o runtime.Object) fields.Set {
				return fields.Set{"spec.unschedulable": boolString(o.(*corev1.Node).Spec.Unschedulable)}
			},
		},
		{
			gv: coreV1, plural: "pods", singular: "pod", kind: "Pod", shortNames: []string{"po"}, categories: []string{"all"},
			namespaced: true, hasStatus: true,
			newObj:   func() runtime.Object { return &corev1.Pod{} },
			newList:  func() runtime.Object { return &corev1.PodList{} },
			defaults: typedDefault(defaulting.Pod),
			prepareCreate: func(o runtime.Object) {
				p := o.(*corev1.Pod)
				p.Status = corev1.PodStatus{Phase: corev1.PodPending}
			},
			validate: typed(validation.Pod), validateUpd: typed2(validation.PodUpdate),
			validateStat:  typed2(validation.PodStatusUpdate),
			prepareStatus: podPrepareStatus,
			fieldSet:      podFields,
			gracePeriod:   podGracePeriod,
		},
		{
			gv: coreV1, plural: "services", singular: "service", kind: "Service", shortNames: []string{"svc"}, categories: []string{"all"},
			namespaced: true, hasStatus: true,
			newObj:        func() runtime.Object { return &corev1.Service{} },
			newList:       func() runtime.Object { return &corev1.ServiceList{} },
			defaults:      typedDefault(defaulting.Service),
			prepareCreate: resetStatus,
			validate:      typed(validation.Service), validateUpd: typed2(validation.ServiceUpdate),
			validateStat: typed2(validation.ServiceStatusUpdate),
			fieldSet: func(o runtime.Object) fields.Set {
				s := o.(*corev1.Service)
				return fields.Set{"spec.clusterIP": s.Spec.ClusterIP, "spec.type": string(s.Spec.Type)}
			},
			claims: svc,
		},
		{
			gv: coreV1, plural: "configmaps", singular: "configmap", kind: "ConfigMap", shortNames: []string{"cm"},
			namespaced: true,
			newObj:     func() runtime.Object { return &corev1.ConfigMap{} },
			newList:    func() runtime.Object { return &corev1.ConfigMapList{} },
			defaults:   typedDefault(defaulting.ConfigMap),
			validate:   typed(validation.ConfigMap), validateUpd: typed2(validation.ConfigMapUpdate),
		},
		coreEvents,
		{
			gv: discoveryV1, plural: "endpointslices", singular: "endpointslice", kind: "EndpointSlice",
			namespaced: true,
			newObj:     func() runtime.Object { return &discoveryv1.EndpointSlice{} },
			newList:    func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
			defaults:   typedDefault(defaulting.EndpointSlice),
			validate:   typed(validation.EndpointSlice), validateUpd: typed2(validation.EndpointSliceUpdate),
		},
		{
			gv: coordinatinV1, plural: "leases", singular: "lease", kind: "Lease",
			namespaced: true,
			newObj:     func() runtime.Object { return &coordinationv1.Lease{} },
			newList:    func() runtime.Object { return &coordinationv1.LeaseList{} },
			validate:   typed(validation.Lease), validateUpd: typed2(validation.LeaseUpdate),
		},
		{
			gv: eventsV1, plural: "events", singular: "event", kind: "Event",
			namespaced: true, createOnUpdate: true,
			newObj:   func() runtime.Object { return &eventsv1.Event{} },
			newList:  func() runtime.Object { return &eventsv1.EventList{} },
			validate: typed(validation.EventsV1Event), validateUpd: typed2(validation.EventsV1EventUpdate),
			fieldSet: eventsV1Fields,
			storedAs: coreEvents, toStored: eventFromV1, fromStored: eventToV1,
		},
	}, append(upstreamCompatResources(), append(appsResources(), accessResources()...)...)...)
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func podFields(o runtime.Object) fields.Set {
	p := o.(*corev1.Pod)
	return fields.Set{
		"spec.nodeName":            p.Spec.NodeName,
		"spec.restartPolicy":       string(p.Spec.RestartPolicy),
		"spec.schedulerName":       p.Spec.SchedulerName,
		"spec.serviceAccountName":  p.Spec.ServiceAccountName,
		"spec.hostNetwork":         boolString(p.Spec.HostNetwork),
		"status.phase":             string(p.Status.Phase),
		"status.podIP":             p.Status.PodIP,
		"status.nominatedNodeName": p.Status.NominatedNodeName,
	}
}

func coreEventFields(o runtime.Object) fields.Set {
	e := o.(*corev1.Event)
	return fields.Set{
		"involvedObject.kind":            e.InvolvedObject.Kind,
		"involvedObject.namespace":       e.InvolvedObject.Namespace,
		"involvedObject.name":            e.InvolvedObject.Name,
		"involvedObject.uid":             string(e.InvolvedObject.UID),
		"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
		"reason":                         e.Reason,
		"reportingComponent":             e.ReportingController,
		"source":                         e.Source.Component,
		"type":                           e.Type,
	}
}

// podGracePeriod mirrors kube-apiserver: a pod that never reached a node or
// already finished goes at once; others wait for their kubelet.
func podGracePeriod(o runtime.Object, requested *int64) int64 {
	p := o.(*corev1.Pod)
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return 0
	}
	if requested != nil {
		return max(*requested, 0)
	}
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return *p.Spec.TerminationGracePeriodSeconds
	}
	return 30
}

// podPrepareStatus is the part of kube-apiserver's pods/status strategy
// beyond the spec: owner references stay (old kubelets corrupted them and
// broke garbage collection), and values a client left out because it does not
// know them (qosClass, observedGeneration) keep their stored value.
func podPrepareStatus(obj, old runtime.Object) {
	p, o := obj.(*corev1.Pod), old.(*corev1.Pod)
	p.OwnerReferences = o.OwnerReferences
	if p.Status.QOSClass == "" {
		p.Status.QOSClass = o.Status.QOSClass
	}
	if p.Status.ObservedGeneration == 0 {
		p.Status.ObservedGeneration = o.Status.ObservedGeneration
	}
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.ObservedGeneration != 0 {
			continue
		}
		for _, oc := range o.Status.Conditions {
			if oc.Type == c.Type {
				c.ObservedGeneration = oc.ObservedGeneration
			}
		}
	}
}
