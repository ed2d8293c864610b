package endpointslice

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Planner tests: pure functions, no API server.

var planSvc = &corev1.Service{
	ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: types.UID("svc-uid"), Labels: map[string]string{"team": "a"}},
	Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.96.0.10"},
}

func testPorts(port int32) []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(port)}}
}

func testEndpoint(name string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{"10.0.0.1"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name},
	}
}

func podNames(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

func testGroup(port int32, names ...string) map[groupKey]*group {
	ports := testPorts(port)
	g := &group{key: groupKey{discoveryv1.AddressTypeIPv4, portsKey(ports)}, ports: ports, endpoints: map[string]discoveryv1.Endpoint{}}
	for _, n := range names {
		g.endpoints[n] = testEndpoint(n, true)
	}
	return map[groupKey]*group{g.key: g}
}

// stored turns planned slices into "stored" ones, as the server would.
func stored(p plan) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	i := 0
	for _, s := range slices.Concat(p.create, p.update) {
		s = s.DeepCopy()
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s%05d", s.GenerateName, i)
			i++
		}
		out = append(out, s)
	}
	return out
}

func planFor(groups map[groupKey]*group, existing []*discoveryv1.EndpointSlice, max int) plan {
	return newPlanner(planSvc, max, time.Time{}).plan(groups, existing)
}

func sizes(ss []*discoveryv1.EndpointSlice) []int {
	var out []int
	for _, s := range ss {
		out = append(out, len(s.Endpoints))
	}
	return out
}

func TestPlanSplitsAndIsStable(t *testing.T) {
	g := testGroup(8080, podNames("p", 0, 250)...)
	p := planFor(g, nil, 100)
	if got := sizes(p.create); !slices.Equal(got, []int{100, 100, 50}) || len(p.update)+len(p.delete) != 0 {
		t.Fatalf("creates %v updates %d deletes %d, want [100 100 50] only", got, len(p.update), len(p.delete))
	}
	s := p.create[0]
	if s.GenerateName != "web-" || s.Labels["team"] != "a" || s.Labels[discoveryv1.LabelManagedBy] != ControllerName ||
		s.Labels[discoveryv1.LabelServiceName] != "web" || s.OwnerReferences[0].UID != "svc-uid" {
		t.Errorf("slice meta %+v", s.ObjectMeta)
	}
	if _, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		t.Error("trigger-time annotation without a trigger")
	}
	if again := planFor(g, stored(p), 100); !again.empty() {
		t.Errorf("second plan not empty: %d/%d/%d", len(again.create), len(again.update), len(again.delete))
	}
}

func TestPlanMinimalChurn(t *testing.T) {
	names := podNames("p", 0, 250)
	existing := stored(planFor(testGroup(8080, names...), nil, 100))

	t.Run("one endpoint changes", func(t *testing.T) {
		g := testGroup(8080, names...)
		g[maps1(g)].endpoints["p150"] = testEndpoint("p150", false)
		p := planFor(g, existing, 100)
		if len(p.update) != 1 || len(p.create)+len(p.delete) != 0 || !slices.ContainsFunc(p.update[0].Endpoints, func(e discoveryv1.Endpoint) bool { return e.TargetRef.Name == "p150" }) {
			t.Fatalf("plan %d/%d/%d, want one update of p150's slice", len(p.create), len(p.update), len(p.delete))
		}
	})
	t.Run("new endpoint goes into the slice with room", func(t *testing.T) {
		p := planFor(testGroup(8080, append(names, "q")...), existing, 100)
		if len(p.update) != 1 || len(p.create)+len(p.delete) != 0 || len(p.update[0].Endpoints) != 51 {
			t.Fatalf("plan %d/%d/%d sizes %v, want the 50-slice updated to 51", len(p.create), len(p.update), len(p.delete), sizes(p.update))
		}
	})
	t.Run("remainder too large for any slice", func(t *testing.T) {
		p := planFor(testGroup(8080, append(slices.Clone(names), podNames("q", 0, 60)...)...), existing, 100)
		if len(p.create) != 1 || len(p.update)+len(p.delete) != 0 || len(p.create[0].Endpoints) != 60 {
			t.Fatalf("plan %d/%d/%d, want one new slice of 60", len(p.create), len(p.update), len(p.delete))
		}
	})
	t.Run("removed endpoint frees room used by a new one", func(t *testing.T) {
		n := slices.Clone(names)
		n = slices.DeleteFunc(n, func(s string) bool { return s == "p010" })
		p := planFor(testGroup(8080, append(n, "q")...), existing, 100)
		if len(p.update) != 1 || len(p.create)+len(p.delete) != 0 || len(p.update[0].Endpoints) != 100 {
			t.Fatalf("plan %d/%d/%d sizes %v, want the first slice updated in place", len(p.create), len(p.update), len(p.delete), sizes(p.update))
		}
	})
	t.Run("ports change recycles slices", func(t *testing.T) {
		p := planFor(testGroup(9090, names...), existing, 100)
		if len(p.update) != 3 || len(p.create)+len(p.delete) != 0 {
			t.Fatalf("plan %d/%d/%d, want 3 updates", len(p.create), len(p.update), len(p.delete))
		}
		for _, s := range p.update {
			if deref(s.Ports[0].Port) != 9090 || s.Name == "" {
				t.Errorf("recycled slice %q ports %s", s.Name, portsKey(s.Ports))
			}
		}
	})
	t.Run("all gone", func(t *testing.T) {
		p := planFor(nil, existing, 100)
		if len(p.delete) != 3 || len(p.create)+len(p.update) != 0 {
			t.Fatalf("plan %d/%d/%d, want 3 deletes", len(p.create), len(p.update), len(p.delete))
		}
	})
}

func maps1(g map[groupKey]*group) groupKey {
	for k := range g {
		return k
	}
	return groupKey{}
}

func TestPlanRepairs(t *testing.T) {
	names := podNames("p", 0, 10)
	g := testGroup(8080, names...)
	existing := stored(planFor(g, nil, 100))

	t.Run("order is not a change", func(t *testing.T) {
		s := existing[0].DeepCopy()
		slices.Reverse(s.Endpoints)
		if p := planFor(g, []*discoveryv1.EndpointSlice{s}, 100); !p.empty() {
			t.Fatalf("reordered endpoints rewritten")
		}
	})
	t.Run("duplicate across slices", func(t *testing.T) {
		dup := existing[0].DeepCopy()
		dup.Name = "web-dup"
		dup.Endpoints = dup.Endpoints[:3]
		p := planFor(g, []*discoveryv1.EndpointSlice{existing[0], dup}, 100)
		if len(p.delete) != 1 || p.delete[0].Name != "web-dup" || len(p.create)+len(p.update) != 0 {
			t.Fatalf("plan %d/%d/%d, want the duplicate slice deleted", len(p.create), len(p.update), len(p.delete))
		}
	})
	t.Run("foreign endpoint and label", func(t *testing.T) {
		s := existing[0].DeepCopy()
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.1"}})
		s.Labels["extra"] = "x"
		p := planFor(g, []*discoveryv1.EndpointSlice{s}, 100)
		if len(p.update) != 1 || len(p.update[0].Endpoints) != 10 || p.update[0].Labels["extra"] != "" {
			t.Fatalf("drift not repaired: %d updates", len(p.update))
		}
	})
	t.Run("previous incarnation of the Service", func(t *testing.T) {
		s := existing[0].DeepCopy()
		s.OwnerReferences[0].UID = "old-uid"
		p := planFor(g, []*discoveryv1.EndpointSlice{s}, 100)
		if len(p.delete) != 1 || len(p.create) != 1 {
			t.Fatalf("plan %d/%d/%d, want the old slice deleted and a new one created", len(p.create), len(p.update), len(p.delete))
		}
	})
	t.Run("lowered limit", func(t *testing.T) {
		p := planFor(g, existing, 4)
		all := append(stored(p), p.delete...)
		if got := sizes(p.update); !slices.Equal(got, []int{4}) || !slices.Equal(sizes(p.create), []int{4, 2}) {
			t.Fatalf("updates %v creates %v, want [4] and [4 2] (%d)", got, sizes(p.create), len(all))
		}
	})
	t.Run("trigger time annotates writes only", func(t *testing.T) {
		at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
		g2 := testGroup(8080, append(slices.Clone(names), "q")...)
		p := newPlanner(planSvc, 100, at).plan(g2, existing)
		if len(p.update) != 1 || p.update[0].Annotations[corev1.EndpointsLastChangeTriggerTime] != "2026-01-02T03:04:05.6Z" {
			t.Fatalf("annotation %v", p.update)
		}
		if p := newPlanner(planSvc, 100, at).plan(g, existing); !p.empty() {
			t.Fatal("a trigger time alone caused a write")
		}
		// The next write without a trigger drops the time it carried.
		g3 := testGroup(8080, append(slices.Clone(names), "q", "r")...)
		p = newPlanner(planSvc, 100, time.Time{}).plan(g3, stored(p))
		if len(p.update) != 1 {
			t.Fatalf("updates %d, want 1", len(p.update))
		}
		if v, ok := p.update[0].Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
			t.Errorf("a write without a trigger kept the last one's time %s", v)
		}
	})
}
