package nodeipam

import "k8s.io/apimachinery/pkg/runtime"

// nopRecorder stands in for a nil record.EventRecorder.
type nopRecorder struct{}

func (nopRecorder) Event(runtime.Object, string, string, string)          {}
func (nopRecorder) Eventf(runtime.Object, string, string, string, ...any) {}
func (nopRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
