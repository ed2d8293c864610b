package ctrlutil

import (
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

func TestRecorder(t *testing.T) {
	r := Recorder(nil)
	if r == nil {
		t.Fatal("Recorder(nil) = nil")
	}
	r.Eventf(nil, "Normal", "Reason", "dropped %d", 1) // must not panic

	fake := record.NewFakeRecorder(1)
	if got := Recorder(fake); got != fake {
		t.Errorf("Recorder(fake) = %v, want the recorder passed in", got)
	}
}

func TestNewQueue(t *testing.T) {
	q := NewQueue("test")
	defer q.ShutDown()
	q.AddRateLimited("a")
	if n := q.NumRequeues("a"); n != 1 {
		t.Errorf("NumRequeues after one AddRateLimited = %d, want 1", n)
	}
}

func TestPodNodeName(t *testing.T) {
	bound := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}
	if got, err := PodNodeName(bound); err != nil || !slices.Equal(got, []string{"n1"}) {
		t.Errorf("bound pod: %v, %v; want [n1]", got, err)
	}
	for _, obj := range []any{&corev1.Pod{}, &corev1.Node{}, nil} {
		if got, err := PodNodeName(obj); err != nil || got != nil {
			t.Errorf("PodNodeName(%T) = %v, %v; want nothing", obj, got, err)
		}
	}
}

func TestAddHandlers(t *testing.T) {
	client := fake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	var mu sync.Mutex
	var seen []string
	inf := factory.Core().V1().Services().Informer()
	synced, err := AddHandlers("test", Handler{Informer: inf, Handler: cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, obj.(*corev1.Service).Name)
	}}})
	if err != nil || len(synced) != 1 {
		t.Fatalf("AddHandlers: %d synced, %v", len(synced), err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, synced...) {
		t.Fatal("not synced")
	}
	// Synced means the handler has seen the initial list.
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []string{"s"}) {
		t.Errorf("handler saw %v before sync, want [s]", seen)
	}
}

func TestEnqueueAndOnChange(t *testing.T) {
	q := NewQueue("test")
	defer q.ShutDown()
	h := OnChange(func(obj any) { Enqueue(q, obj) })
	svc := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	}
	h.OnAdd(svc("added"), false)
	h.OnUpdate(svc("old"), svc("updated"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/deleted", Obj: svc("deleted")})
	Enqueue(q, "not an object") // logged and dropped
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	if want := []string{"ns/added", "ns/updated", "ns/deleted"}; !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
}
