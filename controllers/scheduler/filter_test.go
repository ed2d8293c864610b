package scheduler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestTolerates(t *testing.T) {
	taint := corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		tol  corev1.Toleration
		want bool
	}{
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpEqual, Value: "v", Effect: corev1.TaintEffectNoSchedule}, true},
		{corev1.Toleration{Key: "k", Value: "v"}, true}, // default operator Equal, any effect
		{corev1.Toleration{Key: "k", Value: "w"}, false},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Key: "other", Operator: corev1.TolerationOpExists}, false},
		{corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{corev1.Toleration{Key: "k", Operator: "Bogus", Value: "v"}, false},
	} {
		if got := tolerates(&tc.tol, &taint); got != tc.want {
			t.Errorf("toleration %+v vs taint %+v: %v, want %v", tc.tol, taint, got, tc.want)
		}
	}
}

func TestMatchesTerm(t *testing.T) {
	node := &corev1.Node{}
	node.Name = "n1"
	node.Labels = map[string]string{"zone": "a", "gen": "5"}
	for _, tc := range []struct {
		term corev1.NodeSelectorTerm
		want bool
	}{
		{corev1.NodeSelectorTerm{}, false},
		{corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}, true},
		{corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}}}}, false},
		{corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpDoesNotExist}}}, true},
		{corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gen", Operator: corev1.NodeSelectorOpLt, Values: []string{"5"}}}}, false},
		{corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gen", Operator: corev1.NodeSelectorOpGt, Values: []string{"x"}}}}, false},
		{corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}, true},
		{corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}}}}, false},
		{corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "spec.podCIDR", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}}}, false},
	} {
		if got := matchesTerm(tc.term, node); got != tc.want {
			t.Errorf("term %+v: %v, want %v", tc.term, got, tc.want)
		}
	}
}

func TestSummary(t *testing.T) {
	got := summary(3, map[string]int{reasonSelector: 2, "node(s) had untolerated taint {a: b}": 1})
	want := "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {a: b}."
	if got != want {
		t.Errorf("summary = %q\nwant      %q", got, want)
	}
	if got := summary(0, nil); !strings.HasPrefix(got, "0/0 nodes are available") {
		t.Errorf("summary with no nodes = %q", got)
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.SchedulerName != "default-scheduler" {
		t.Errorf("zero options = %+v, %v; want default-scheduler", o, err)
	}
	if err := (Options{SchedulerName: "Not A Name"}).Validate(); err == nil || !strings.Contains(err.Error(), "--scheduler-name") {
		t.Errorf("bad name: err %v, want one naming --scheduler-name", err)
	}
}
