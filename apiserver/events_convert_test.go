package apiserver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/dump"
	"sigs.k8s.io/randfill"
)

// TestEventConversionRoundTrip fills every field of both Event shapes with
// random values and converts there and back: nothing may be lost.
func TestEventConversionRoundTrip(t *testing.T) {
	f := randfill.NewWithSeed(1).NilChance(0.2).Funcs(
		func(mt *metav1.MicroTime, c randfill.Continue) { mt.Time = metav1.Now().Rfc3339Copy().Time },
		func(tm *metav1.Time, c randfill.Continue) { tm.Time = metav1.Now().Rfc3339Copy().Time },
	)
	for i := 0; i < 500; i++ {
		v1 := &eventsv1.Event{TypeMeta: eventsV1TypeMeta}
		roundTrip(t, f, v1, "events.k8s.io/v1 -> core -> events.k8s.io/v1", func(o runtime.Object) runtime.Object { return eventToV1(eventFromV1(o)) })
		core := &corev1.Event{TypeMeta: coreEventTypeMeta}
		roundTrip(t, f, core, "core -> events.k8s.io/v1 -> core", func(o runtime.Object) runtime.Object { return eventFromV1(eventToV1(o)) })
	}
}

// roundTrip fills obj at random (keeping its TypeMeta) and fails unless
// there-and-back returns it unchanged.
func roundTrip(t *testing.T, f *randfill.Filler, obj runtime.Object, what string, thereAndBack func(runtime.Object) runtime.Object) {
	t.Helper()
	gvk := obj.GetObjectKind().GroupVersionKind()
	f.Fill(obj)
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	if back := thereAndBack(obj); !apiequality.Semantic.DeepEqual(back, obj) {
		t.Fatalf("%s changed the event:\nwant %s\ngot  %s", what, dump.Pretty(obj), dump.Pretty(back))
	}
}

// TestEventsV1FieldSelectorLabels: every events.k8s.io/v1 field label reads
// the core field upstream maps it to.
func TestEventsV1FieldSelectorLabels(t *testing.T) {
	e := &corev1.Event{
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p", UID: "u", APIVersion: "v1", ResourceVersion: "7", FieldPath: "spec"},
		Reason:              "Started",
		Source:              corev1.EventSource{Component: "kubelet"},
		Type:                corev1.EventTypeWarning,
		ReportingController: "kube-proxy",
	}
	got := eventsV1Fields(e)
	want := map[string]string{
		"regarding.kind": "Pod", "regarding.namespace": "ns", "regarding.name": "p", "regarding.uid": "u",
		"regarding.apiVersion": "v1", "regarding.resourceVersion": "7", "regarding.fieldPath": "spec",
		"reason": "Started", "source": "kubelet", "type": "Warning", "reportingController": "kube-proxy",
	}
	if len(got) != len(want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
