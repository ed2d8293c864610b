package endpointslice

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// Event handlers only find the affected Services and queue their keys
// (with the time of the triggering change); every API call happens in sync.

func (c *Controller) enqueue(key string, trigger time.Time) {
	c.triggers.note(key, trigger)
	c.queue.Add(key)
}

func serviceKey(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

func (c *Controller) addService(obj any) {
	if svc, ok := obj.(*corev1.Service); ok {
		c.enqueue(serviceKey(svc), time.Now())
	}
}

func (c *Controller) updateService(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Service)
	svc, ok2 := newObj.(*corev1.Service)
	if !ok1 || !ok2 {
		return
	}
	// Status (load balancer ingress) and resyncs do not change endpoints;
	// labels do, since slices carry them.
	if old.UID == svc.UID && maps.Equal(old.Labels, svc.Labels) && apiequality.Semantic.DeepEqual(old.Spec, svc.Spec) {
		return
	}
	c.enqueue(serviceKey(svc), time.Now())
}

func (c *Controller) deleteService(obj any) {
	if svc, ok := cacheObject[*corev1.Service](obj); ok {
		c.enqueue(serviceKey(svc), time.Now())
	}
}

func (c *Controller) addPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !podEligible(pod) {
		return // a pod without an IP is in no slice yet
	}
	c.enqueuePodServices(time.Now(), pod)
}

func (c *Controller) updatePod(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 || !podChanged(old, pod) {
		return
	}
	c.enqueuePodServices(time.Now(), old, pod)
}

func (c *Controller) deletePod(obj any) {
	// Even a pod that looks ineligible is queued: a tombstone may carry an
	// outdated copy of it.
	if pod, ok := cacheObject[*corev1.Pod](obj); ok {
		c.enqueuePodServices(time.Now(), pod)
	}
}

// enqueuePodServices queues every Service selecting any of pods (the old
// and new versions of one pod, whose labels may differ).
func (c *Controller) enqueuePodServices(trigger time.Time, pods ...*corev1.Pod) {
	svcs := map[string]*corev1.Service{}
	for _, p := range pods {
		c.servicesForLabels(p.Namespace, p.Labels, svcs)
	}
	for key := range svcs {
		c.enqueue(key, trigger)
	}
}

// podChanged reports whether an update changes anything a slice shows.
// Most pod updates (container statuses, resourceVersion-only resyncs,
// annotations) do not, and a thousand Services must not be resynced for
// them.
func podChanged(old, pod *corev1.Pod) bool {
	if old.ResourceVersion == pod.ResourceVersion {
		return false
	}
	oldIn, newIn := podEligible(old), podEligible(pod)
	switch {
	case !oldIn && !newIn:
		return false
	case oldIn != newIn, old.UID != pod.UID:
		return true
	}
	if !maps.Equal(old.Labels, pod.Labels) ||
		old.Spec.NodeName != pod.Spec.NodeName ||
		old.Spec.Hostname != pod.Spec.Hostname || old.Spec.Subdomain != pod.Spec.Subdomain ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) ||
		podReady(old) != podReady(pod) ||
		old.Status.PodIP != pod.Status.PodIP ||
		!apiequality.Semantic.DeepEqual(old.Status.PodIPs, pod.Status.PodIPs) {
		return true
	}
	// Container ports resolve named targetPorts. They are immutable in
	// Kubernetes, but comparing them is cheap insurance.
	return !containerPortsEqual(old.Spec.Containers, pod.Spec.Containers) ||
		!containerPortsEqual(old.Spec.InitContainers, pod.Spec.InitContainers)
}

func containerPortsEqual(a, b []corev1.Container) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !apiequality.Semantic.DeepEqual(a[i].Ports, b[i].Ports) {
			return false
		}
	}
	return true
}

// Node zone labels become endpoint zones. A node change is not a pod or
// Service change, so it carries no trigger time (the annotation's
// definition).

func (c *Controller) addNode(obj any) {
	if n, ok := obj.(*corev1.Node); ok && n.Labels[corev1.LabelTopologyZone] != "" {
		c.enqueueNodeServices(n.Name)
	}
}

func (c *Controller) updateNode(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if ok1 && ok2 && old.Labels[corev1.LabelTopologyZone] != n.Labels[corev1.LabelTopologyZone] {
		c.enqueueNodeServices(n.Name)
	}
}

func (c *Controller) deleteNode(obj any) {
	if n, ok := cacheObject[*corev1.Node](obj); ok && n.Labels[corev1.LabelTopologyZone] != "" {
		c.enqueueNodeServices(n.Name)
	}
}

func (c *Controller) enqueueNodeServices(node string) {
	objs, err := c.podIndex.ByIndex(podByNodeIndex, node)
	if err != nil {
		return
	}
	svcs := map[string]*corev1.Service{}
	for _, o := range objs {
		if p := o.(*corev1.Pod); podEligible(p) {
			c.servicesForLabels(p.Namespace, p.Labels, svcs)
		}
	}
	for key := range svcs {
		c.enqueue(key, time.Time{})
	}
}

// Slice events: the echo of our own writes is ignored; any other change to
// a slice of ours (an edit, a deletion, a relabel) is drift, repaired by
// resyncing its Service.

func (c *Controller) addSlice(obj any) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	if key, ok := managedSliceService(s); ok {
		c.sliceEvent(key)(c.tracker.observed(key, s))
	}
}

func (c *Controller) updateSlice(oldObj, newObj any) {
	old, ok1 := oldObj.(*discoveryv1.EndpointSlice)
	s, ok2 := newObj.(*discoveryv1.EndpointSlice)
	if !ok1 || !ok2 || old.ResourceVersion == s.ResourceVersion {
		return
	}
	oldKey, oldOurs := managedSliceService(old)
	key, ours := managedSliceService(s)
	if oldOurs && (!ours || oldKey != key) {
		// Relabelled away from its Service: for that Service it is as if
		// deleted.
		c.tracker.observedDelete(oldKey, old.Name)
		c.enqueue(oldKey, time.Time{})
	}
	if ours {
		c.sliceEvent(key)(c.tracker.observed(key, s))
	}
}

func (c *Controller) deleteSlice(obj any) {
	s, ok := cacheObject[*discoveryv1.EndpointSlice](obj)
	if !ok {
		return
	}
	if key, ok := managedSliceService(s); ok {
		c.sliceEvent(key)(c.tracker.observedDelete(key, s.Name))
	}
}

// sliceEvent queues key unless the event was only the echo of our own
// write that nobody waits for.
func (c *Controller) sliceEvent(key string) func(own, wake bool) {
	return func(own, wake bool) {
		if !own || wake {
			c.enqueue(key, time.Time{})
		}
	}
}
