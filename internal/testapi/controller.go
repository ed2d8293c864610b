package testapi

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Runner is a constructed controller.
type Runner interface {
	Run(ctx context.Context, workers int)
}

// RunController builds a controller on a fresh informer factory, with events
// recorded into the API server as in production, and runs it until the
// returned stop is called or the test ends.
func RunController(t testing.TB, client kubernetes.Interface, component string, workers int,
	build func(informers.SharedInformerFactory, record.EventRecorder) (Runner, error)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(Context(t))
	factory := informers.NewSharedInformerFactory(client, 0)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
	c, err := build(factory, recorder)
	if err != nil {
		cancel()
		broadcaster.Shutdown()
		t.Fatalf("build %s: %v", component, err)
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx, workers) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			factory.Shutdown()
			broadcaster.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}
