package apiserver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		v1 := &eventsv1.Event{}
		f.Fill(v1)
		v1.TypeMeta = eventsV1TypeMeta
		back := eventToV1(eventFromV1(v1))
		if !apiequality.Semantic.DeepEqual(back, v1) {
			t.Fatalf("events.k8s.io/v1 -> core -> events.k8s.io/v1 changed the event:\nwant %s\ngot  %s", dump.Pretty(v1), dump.Pretty(back))
		}
		core := &corev1.Event{}
		f.Fill(core)
		core.TypeMeta = coreEventTypeMeta
		coreBack := eventFromV1(eventToV1(core))
		if !apiequality.Semantic.DeepEqual(coreBack, core) {
			t.Fatalf("core -> events.k8s.io/v1 -> core changed the event:\nwant %s\ngot  %s", dump.Pretty(core), dump.Pretty(coreBack))
		}
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
