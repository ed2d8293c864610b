package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// proxyEvent is an event as kube-proxy's events.k8s.io/v1 recorder writes it.
func proxyEvent(ns, name, about string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: ns},
		EventTime:           metav1.NewMicroTime(time.Now().Truncate(time.Microsecond)),
		ReportingController: "kube-proxy",
		ReportingInstance:   "kube-proxy-node-a",
		Action:              "StartKubeProxy",
		Reason:              "Starting",
		Regarding:           corev1.ObjectReference{Kind: "Node", Name: about, UID: types.UID(about), APIVersion: "v1"},
		Related:             &corev1.ObjectReference{Kind: "Pod", Name: "kube-proxy-x", Namespace: "kube-system"},
		Note:                "Starting kube-proxy.",
		Type:                corev1.EventTypeNormal,
		Series:              &eventsv1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(time.Now().Truncate(time.Microsecond))},
	}
}

// TestEventsOneResourceTwoAPIs: core/v1 and events.k8s.io/v1 Events are the
// same stored objects: what one API writes the other reads, lists, watches,
// updates, patches and deletes, with the fields mapped as upstream does.
func TestEventsOneResourceTwoAPIs(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	core, v1 := ts.client.CoreV1().Events("default"), ts.client.EventsV1().Events("default")

	// events.k8s.io/v1 write, core/v1 read.
	pe := proxyEvent("default", "node-a.proxy", "node-a")
	created, err := v1.Create(ctx, pe, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create events.k8s.io/v1: %v", err)
	}
	ce, err := core.Get(ctx, "node-a.proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("core/v1 get of an events.k8s.io/v1 event: %v", err)
	}
	if ce.Message != pe.Note || ce.InvolvedObject != pe.Regarding || *ce.Related != *pe.Related ||
		ce.ReportingController != "kube-proxy" || ce.ReportingInstance != pe.ReportingInstance ||
		ce.Action != pe.Action || ce.Reason != pe.Reason || ce.Type != pe.Type ||
		!ce.EventTime.Equal(&pe.EventTime) || ce.Series == nil || ce.Series.Count != 3 ||
		!ce.Series.LastObservedTime.Equal(&pe.Series.LastObservedTime) {
		t.Errorf("core view of %+v is %+v", pe, ce)
	}
	if ce.ResourceVersion != created.ResourceVersion || ce.UID != created.UID {
		t.Errorf("core view rv/uid %s/%s, want %s/%s", ce.ResourceVersion, ce.UID, created.ResourceVersion, created.UID)
	}

	// core/v1 write (an old-style recorder), events.k8s.io/v1 read.
	old := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "node-b.legacy"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-b"},
		Reason:         "NodeReady", Message: "node is ready", Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-b"},
		FirstTimestamp: metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second)),
		LastTimestamp:  metav1.NewTime(time.Now().Truncate(time.Second)),
		Count:          2,
	}
	if _, err := core.Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create core/v1: %v", err)
	}
	ve, err := v1.Get(ctx, "node-b.legacy", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("events.k8s.io/v1 get of a core/v1 event: %v", err)
	}
	if ve.APIVersion != "events.k8s.io/v1" && ve.APIVersion != "" {
		t.Errorf("apiVersion %q", ve.APIVersion)
	}
	if ve.Note != old.Message || ve.Regarding != old.InvolvedObject || ve.DeprecatedSource != old.Source ||
		!ve.DeprecatedFirstTimestamp.Equal(&old.FirstTimestamp) || !ve.DeprecatedLastTimestamp.Equal(&old.LastTimestamp) ||
		ve.DeprecatedCount != 2 || ve.Reason != "NodeReady" {
		t.Errorf("events.k8s.io/v1 view of %+v is %+v", old, ve)
	}

	// Lists: both APIs list both events, with their own field labels.
	coreList, err := core.List(ctx, metav1.ListOptions{})
	if err != nil || len(coreList.Items) != 2 {
		t.Fatalf("core list: %v, %d items, want 2", err, len(coreList.Items))
	}
	v1List, err := v1.List(ctx, metav1.ListOptions{})
	if err != nil || len(v1List.Items) != 2 {
		t.Fatalf("events.k8s.io/v1 list: %v, %d items, want 2", err, len(v1List.Items))
	}
	for _, tc := range []struct {
		api, selector, want string
	}{
		{"core", "reportingComponent=kube-proxy", "node-a.proxy"},
		{"core", "involvedObject.name=node-b", "node-b.legacy"},
		{"core", "source=kubelet", "node-b.legacy"},
		{"v1", "reportingController=kube-proxy", "node-a.proxy"},
		{"v1", "regarding.name=node-b", "node-b.legacy"},
		{"v1", "regarding.kind=Node,reason=Starting", "node-a.proxy"},
		{"v1", "type=Normal,regarding.uid=node-a", "node-a.proxy"},
	} {
		var names []string
		opts := metav1.ListOptions{FieldSelector: tc.selector}
		for _, rv := range []string{"", "0"} { // from etcd and from the cache
			opts.ResourceVersion = rv
			names = names[:0]
			if tc.api == "core" {
				l, err := core.List(ctx, opts)
				if err != nil {
					t.Fatalf("core list %s: %v", tc.selector, err)
				}
				for _, e := range l.Items {
					names = append(names, e.Name)
				}
			} else {
				l, err := v1.List(ctx, opts)
				if err != nil {
					t.Fatalf("events.k8s.io/v1 list %s: %v", tc.selector, err)
				}
				for _, e := range l.Items {
					names = append(names, e.Name)
				}
			}
			if len(names) != 1 || names[0] != tc.want {
				t.Errorf("%s list fieldSelector=%s rv=%q: %v, want [%s]", tc.api, tc.selector, rv, names, tc.want)
			}
		}
	}
	// A core field label is not an events.k8s.io/v1 one (as upstream).
	if _, err := v1.List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-b"}); !apierrors.IsBadRequest(err) {
		t.Errorf("events.k8s.io/v1 list by involvedObject.name: got %v, want BadRequest", err)
	}

	// Watches: a watch through one API sees writes through the other, from
	// the resourceVersion of a list through the other, filtered by field.
	w, err := v1.Watch(ctx, metav1.ListOptions{ResourceVersion: coreList.ResourceVersion, FieldSelector: fields.OneTermEqualSelector("regarding.name", "node-c").String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cw, err := core.Watch(ctx, metav1.ListOptions{ResourceVersion: v1List.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Stop()
	if _, err := core.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "node-x.ignored"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-x"}, Reason: "Other"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "node-c.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-c"}, Reason: "Rebooted", Message: "it rebooted"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w)
	got, ok := ev.Object.(*eventsv1.Event)
	if ev.Type != watch.Added || !ok || got.Name != "node-c.1" || got.Note != "it rebooted" || got.Regarding.Name != "node-c" {
		t.Fatalf("events.k8s.io/v1 watch: %s %#v, want ADDED node-c.1 in events.k8s.io/v1 form", ev.Type, ev.Object)
	}
	if _, err := v1.Create(ctx, proxyEvent("default", "node-d.proxy", "node-d"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 3 {
		ev := nextEvent(t, cw)
		e, ok := ev.Object.(*corev1.Event)
		if ev.Type != watch.Added || !ok {
			t.Fatalf("core watch: %s %#v", ev.Type, ev.Object)
		}
		seen = append(seen, e.Name)
	}
	if strings.Join(seen, ",") != "node-x.ignored,node-c.1,node-d.proxy" {
		t.Errorf("core watch saw %v, want node-x.ignored, node-c.1, node-d.proxy", seen)
	}

	// Update through core (a recorder counting a repeat), read through v1.
	ce.Series.Count = 4
	ce.Message = "Starting kube-proxy (again)."
	if _, err := core.Update(ctx, ce, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("core update of an events.k8s.io/v1 event: %v", err)
	}
	if ve, err := v1.Get(ctx, "node-a.proxy", metav1.GetOptions{}); err != nil || ve.Series.Count != 4 || ve.Note != ce.Message {
		t.Errorf("after core update the events.k8s.io/v1 view is %+v, %v", ve, err)
	}
	// Patch through v1 (the events.k8s.io recorder's series update), read
	// through core.
	patch := []byte(`{"series":{"count":5,"lastObservedTime":"2030-01-02T03:04:05.000006Z"}}`)
	if _, err := v1.Patch(ctx, "node-a.proxy", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("events.k8s.io/v1 patch: %v", err)
	}
	if ce, err := core.Get(ctx, "node-a.proxy", metav1.GetOptions{}); err != nil || ce.Series.Count != 5 || ce.Series.LastObservedTime.Year() != 2030 {
		t.Errorf("after the events.k8s.io/v1 patch the core view is %+v, %v", ce, err)
	}
	// events.k8s.io/v1 keeps its stricter update rules on core-created events.
	ve.Note = "rewritten"
	ve.ResourceVersion = ""
	if _, err := v1.Update(ctx, ve, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("events.k8s.io/v1 update changing note: got %v, want Invalid", err)
	}
	// PUT through v1 of a missing event creates it, as for core.
	put := proxyEvent("default", "node-e.put", "node-e")
	if _, err := v1.Update(ctx, put, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("events.k8s.io/v1 create-on-update: %v", err)
	}
	if _, err := core.Get(ctx, "node-e.put", metav1.GetOptions{}); err != nil {
		t.Errorf("core get of an event created by an events.k8s.io/v1 PUT: %v", err)
	}

	// Delete through one API, gone from the other.
	if err := v1.Delete(ctx, "node-b.legacy", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("events.k8s.io/v1 delete of a core event: %v", err)
	}
	if _, err := core.Get(ctx, "node-b.legacy", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("core get after events.k8s.io/v1 delete: %v, want NotFound", err)
	}
	if err := core.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "reportingComponent=kube-proxy"}); err != nil {
		t.Fatal(err)
	}
	if l, err := v1.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 2 {
		t.Errorf("events.k8s.io/v1 list after core deletecollection of kube-proxy events: %v, %d items, want 2 (node-x, node-c)", err, len(l.Items))
	}

	// One stored copy: everything is under core's prefix.
	if keys := etcdKeys(t, ts, "/registry/events/default/"); len(keys) != 2 {
		t.Errorf("etcd /registry/events/default/: %d keys, want 2", len(keys))
	}
	if keys := etcdKeys(t, ts, "/registry/events.k8s.io/"); len(keys) != 0 {
		t.Errorf("etcd /registry/events.k8s.io/: %d keys, want none", len(keys))
	}
}

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event in 10s")
	}
	return watch.Event{}
}

// TestKubectlShowsEventsOfBothAPIs: `kubectl get events`, `kubectl events`
// and `kubectl get events.events.k8s.io` of the real clients show events
// written through either API.
func TestKubectlShowsEventsOfBothAPIs(t *testing.T) {
	bins := kubectlBinaries(t)
	ts := startServer(t)
	ctx := context.Background()
	if _, err := ts.client.EventsV1().Events("default").Create(ctx, proxyEvent("default", "node-a.proxy", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "node-b.legacy"}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-b"},
		Reason: "NodeReady", Message: "node is ready", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "kubelet"},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, v := range kubectlVersions {
		k := newKubectl(t, bins[v], ts.KubeconfigPath())
		t.Run("v"+v, func(t *testing.T) {
			out := k.ok(t, "get", "events", "-n", "default")
			wantContains(t, "kubectl get events", out, "node/node-a", "Starting kube-proxy.", "node/node-b", "node is ready")
			out = k.ok(t, "events", "-n", "default")
			wantContains(t, "kubectl events", out, "Node/node-a", "Starting kube-proxy.", "Node/node-b", "node is ready")
			out = k.ok(t, "events", "-n", "default", "--for", "node/node-a")
			wantContains(t, "kubectl events --for node/node-a", out, "Starting kube-proxy.")
			if strings.Contains(out, "node is ready") {
				t.Errorf("kubectl events --for node/node-a shows node-b's event:\n%s", out)
			}
			out = k.ok(t, "get", "events.events.k8s.io", "-n", "default")
			wantContains(t, "kubectl get events.events.k8s.io", out, "node/node-a", "node/node-b", "node is ready")
			out = k.ok(t, "get", "events.v1.events.k8s.io", "node-b.legacy", "-n", "default", "-o", "jsonpath={.note}")
			if out != "node is ready" {
				t.Errorf("kubectl get events.v1.events.k8s.io node-b.legacy -o jsonpath={.note} = %q", out)
			}
		})
	}
}

// TestEventsStoredApartAreMigrated: events.k8s.io/v1 events that an earlier
// version stored under their own prefix are moved to the shared one at
// start; a name already taken by a core event is left alone.
func TestEventsStoredApartAreMigrated(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	if _, err := ts.client.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "taken"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n"}, Message: "core"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old", "taken"} {
		e := proxyEvent("default", name, "node-old")
		e.TypeMeta = metav1.TypeMeta{Kind: "Event", APIVersion: "events.k8s.io/v1"}
		e.UID = "uid-" + types.UID(name)
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.EtcdClient().Put(ctx, "/registry/events.k8s.io/events/default/"+name, string(data)); err != nil {
			t.Fatal(err)
		}
	}
	ts.restart(t)
	got, err := ts.client.EventsV1().Events("default").Get(ctx, "old", metav1.GetOptions{})
	if err != nil || got.UID != "uid-old" || got.Note != "Starting kube-proxy." || got.Series == nil {
		t.Fatalf("migrated event: %+v, %v", got, err)
	}
	if ce, err := ts.client.CoreV1().Events("default").Get(ctx, "taken", metav1.GetOptions{}); err != nil || ce.Message != "core" {
		t.Errorf("core event with a clashing name: %+v, %v; want it unchanged", ce, err)
	}
	left := etcdKeys(t, ts, "/registry/events.k8s.io/events/")
	if len(left) != 1 || left["default/taken"] == "" {
		t.Errorf("left under the old prefix: %v, want only default/taken", left)
	}
}
