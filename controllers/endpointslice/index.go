package endpointslice

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Index names carry the controller's prefix: the informers are shared with
// other controllers, and two indexers of one name on one informer conflict.
const (
	serviceBySelectorIndex = "nodenet.io/endpointslice-service-selector"
	podByLabelIndex        = "nodenet.io/endpointslice-pod-label"
	podByNodeIndex         = "nodenet.io/endpointslice-pod-node"
	sliceByServiceIndex    = "nodenet.io/endpointslice-slice-service"
)

// pairKey is the index value of one label (or selector) pair in a
// namespace. Services are found from a pod, and pods from a service, through
// their shared pairs: scanning every Service for every pod event (or every
// pod for every sync) is quadratic at a thousand services.
func pairKey(ns, k, v string) string { return ns + "/" + k + "=" + v }

func serviceSelectorPairs(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || len(svc.Spec.Selector) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(svc.Spec.Selector))
	for k, v := range svc.Spec.Selector {
		out = append(out, pairKey(svc.Namespace, k, v))
	}
	return out, nil
}

func podLabelPairs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || len(pod.Labels) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(pod.Labels))
	for k, v := range pod.Labels {
		out = append(out, pairKey(pod.Namespace, k, v))
	}
	return out, nil
}

// sliceService indexes only our slices, by their Service's key.
func sliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	if key, ok := managedSliceService(s); ok {
		return []string{key}, nil
	}
	return nil, nil
}

// managedSliceService returns the key of the Service a slice of ours
// belongs to; ok is false for slices we do not manage.
func managedSliceService(s *discoveryv1.EndpointSlice) (string, bool) {
	if s.Labels[discoveryv1.LabelManagedBy] != ControllerName {
		return "", false
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return "", false
	}
	return s.Namespace + "/" + name, true
}

// selectorMatches is labels.SelectorFromSet(sel).Matches(labels) without
// building a selector: Service selectors are plain equality maps, and the
// pod handlers test many services per event.
func selectorMatches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// servicesForLabels returns the services in ns whose selector matches
// labels, looked up through the selector-pair index.
func (c *Controller) servicesForLabels(ns string, labels map[string]string, into map[string]*corev1.Service) {
	for k, v := range labels {
		objs, err := c.serviceIndex.ByIndex(serviceBySelectorIndex, pairKey(ns, k, v))
		if err != nil {
			continue // only an unknown index name fails, and ours is registered in New
		}
		for _, o := range objs {
			svc := o.(*corev1.Service)
			if selectorMatches(svc.Spec.Selector, labels) {
				into[svc.Namespace+"/"+svc.Name] = svc
			}
		}
	}
}

// podsForService returns the pods of svc's namespace its selector matches.
// It starts from the smallest bucket of the selector's pairs: for
// "app=web,tier=frontend" that is usually app=web.
func (c *Controller) podsForService(svc *corev1.Service) []*corev1.Pod {
	var best string
	bestN := -1
	for k, v := range svc.Spec.Selector {
		key := pairKey(svc.Namespace, k, v)
		if len(svc.Spec.Selector) == 1 {
			best = key
			break
		}
		keys, err := c.podIndex.IndexKeys(podByLabelIndex, key)
		if err != nil {
			continue
		}
		if bestN < 0 || len(keys) < bestN {
			best, bestN = key, len(keys)
		}
	}
	if best == "" {
		return nil
	}
	objs, err := c.podIndex.ByIndex(podByLabelIndex, best)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if selectorMatches(svc.Spec.Selector, pod.Labels) {
			out = append(out, pod)
		}
	}
	return out
}

// managedSlices returns our slices of the service key.
func (c *Controller) managedSlices(key string) []*discoveryv1.EndpointSlice {
	objs, err := c.sliceIndex.ByIndex(sliceByServiceIndex, key)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	return out
}

// cacheObject unwraps the tombstone a delete handler may receive.
func cacheObject[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	v, ok := obj.(T)
	return v, ok
}
