package ctrlutil

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
