package nodelifecycle

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// nopRecorder stands in when the caller passes no recorder.
type nopRecorder struct{}

func (nopRecorder) Event(runtime.Object, string, string, string)          {}
func (nopRecorder) Eventf(runtime.Object, string, string, string, ...any) {}
func (nopRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
