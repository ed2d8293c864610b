package daemonset

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// writeTTL bounds how long a write may go unseen before the tracker gives up
// on it: an informer that missed an event relists long before that, so an
// entry this old can only be a pod that came and went between two looks.
const writeTTL = time.Minute

// tracker remembers the pod writes of each DaemonSet that the informer has
// not shown yet. Deciding from a cache that lags one's own writes would
// create a second pod on a node, or delete one twice; kube's controller
// keeps "expectations" for the same reason. Here the check is against the
// cache itself: a created pod is seen once the cache holds it, a deletion
// once the cache holds the pod terminating or not at all.
type tracker struct {
	mu      sync.Mutex
	now     func() time.Time
	created map[string]map[string]time.Time   // daemonset key -> pod name -> when
	deleted map[string]map[types.UID]deletion // daemonset key -> pod UID -> deletion
}

type deletion struct {
	name string
	at   time.Time
}

func newTracker(now func() time.Time) *tracker {
	return &tracker{now: now, created: map[string]map[string]time.Time{}, deleted: map[string]map[types.UID]deletion{}}
}

func (t *tracker) wroteCreate(key, pod string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.created[key] == nil {
		t.created[key] = map[string]time.Time{}
	}
	t.created[key][pod] = t.now()
}

func (t *tracker) wroteDelete(key string, pod *corev1.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.deleted[key] == nil {
		t.deleted[key] = map[types.UID]deletion{}
	}
	t.deleted[key][pod.UID] = deletion{name: pod.Name, at: t.now()}
}

// settled reports whether the cache shows every write made for key; get
// looks a pod of the DaemonSet's namespace up in the cache.
func (t *tracker) settled(key string, get func(name string) *corev1.Pod) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for name, at := range t.created[key] {
		if get(name) != nil || now.Sub(at) > writeTTL {
			delete(t.created[key], name)
		}
	}
	for uid, d := range t.deleted[key] {
		p := get(d.name)
		if p == nil || p.UID != uid || p.DeletionTimestamp != nil || now.Sub(d.at) > writeTTL {
			delete(t.deleted[key], uid)
		}
	}
	if len(t.created[key]) == 0 {
		delete(t.created, key)
	}
	if len(t.deleted[key]) == 0 {
		delete(t.deleted, key)
	}
	return t.created[key] == nil && t.deleted[key] == nil
}

// forget drops what is tracked for a DaemonSet that is gone.
func (t *tracker) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.created, key)
	delete(t.deleted, key)
}
