package endpointslice

import (
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func trackedSlice(name, rv string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func TestSliceTracker(t *testing.T) {
	cache := map[string]*discoveryv1.EndpointSlice{}
	tr := newSliceTracker(func(_, name string) *discoveryv1.EndpointSlice { return cache[name] })
	now := time.Unix(1000, 0)
	tr.now = func() time.Time { return now }
	list := func() []*discoveryv1.EndpointSlice { return nil }
	const key = "ns/web"

	if _, stale := tr.view(key, list); stale {
		t.Fatal("fresh tracker reports stale")
	}

	// Our create, not yet in the cache: stale until its echo.
	tr.wrote(key, trackedSlice("a", "10"))
	if _, stale := tr.view(key, list); !stale {
		t.Fatal("unseen create not stale")
	}
	if own, wake := tr.observed(key, trackedSlice("a", "9")); own || !wake {
		t.Fatalf("older event: own=%v wake=%v, want false/true", own, wake)
	}
	if _, stale := tr.view(key, list); !stale {
		t.Fatal("an older event settled the write")
	}
	if own, _ := tr.observed(key, trackedSlice("a", "10")); !own {
		t.Fatal("echo not recognised as own")
	}
	if _, stale := tr.view(key, list); stale {
		t.Fatal("stale after the echo")
	}
	if own, _ := tr.observed(key, trackedSlice("a", "11")); own {
		t.Fatal("someone else's update taken as own")
	}

	// An echo faster than our response: nothing to wait for.
	cache["b"] = trackedSlice("b", "20")
	tr.wrote(key, trackedSlice("b", "20"))
	if _, stale := tr.view(key, list); stale {
		t.Fatal("write already in the cache counted as pending")
	}

	// A relist that skipped our exact echo still settles it (newer rv).
	tr.wrote(key, trackedSlice("c", "30"))
	if own, _ := tr.observed(key, trackedSlice("c", "35")); own {
		t.Fatal("newer version taken as own")
	}
	if _, stale := tr.view(key, list); stale {
		t.Fatal("newer version did not settle the write")
	}

	// Deletes: pending until the delete event.
	tr.removed(key, trackedSlice("b", "20"))
	if _, stale := tr.view(key, list); !stale {
		t.Fatal("unseen delete not stale")
	}
	if own, _ := tr.observedDelete(key, "b"); !own {
		t.Fatal("own delete not recognised")
	}
	if own, _ := tr.observedDelete(key, "zzz"); own {
		t.Fatal("foreign delete taken as own")
	}

	// A write whose echo never comes stops blocking after staleGiveUp.
	tr.wrote(key, trackedSlice("d", "40"))
	now = now.Add(staleGiveUp + time.Second)
	if _, stale := tr.view(key, list); stale {
		t.Fatal("lost write blocks forever")
	}
	if len(tr.pending) != 0 {
		t.Errorf("tracker holds %v after everything settled", tr.pending)
	}
}
