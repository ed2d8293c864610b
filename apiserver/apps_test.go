package apiserver_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

// testDaemonSet is the smallest DaemonSet kube-apiserver accepts.
func testDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
			},
		},
	}
}

// TestDaemonSetDefaults: a DaemonSet gets kube-apiserver's defaults (a
// RollingUpdate of one node at a time, ten revisions, the pod defaults on
// the template but not the pod admission tolerations), generation 1, the
// template generation annotation, and no status whatever the client sent.
func TestDaemonSetDefaults(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	in := testDaemonSet("defaults")
	in.Status.NumberReady = 3
	in.Annotations = map[string]string{appsv1.DeprecatedTemplateGeneration: "7"}
	ds, err := ts.client.AppsV1().DaemonSets("default").Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
		*ru.MaxUnavailable != intstr.FromInt32(1) || *ru.MaxSurge != intstr.FromInt32(0) {
		t.Errorf("updateStrategy = %+v (rollingUpdate %+v), want RollingUpdate maxUnavailable 1 maxSurge 0", ds.Spec.UpdateStrategy, ru)
	}
	if ds.Spec.RevisionHistoryLimit == nil || *ds.Spec.RevisionHistoryLimit != 10 {
		t.Errorf("revisionHistoryLimit = %v, want 10", ds.Spec.RevisionHistoryLimit)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if spec.RestartPolicy != corev1.RestartPolicyAlways || spec.DNSPolicy != corev1.DNSClusterFirst || spec.SchedulerName != corev1.DefaultSchedulerName ||
		spec.TerminationGracePeriodSeconds == nil || c.ImagePullPolicy != corev1.PullIfNotPresent || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("template not defaulted like a pod: %+v", spec)
	}
	if len(spec.Tolerations) != 0 {
		t.Errorf("template tolerations = %v, want none (admission defaults are for pods)", spec.Tolerations)
	}
	if ds.Generation != 1 || ds.Annotations[appsv1.DeprecatedTemplateGeneration] != "1" {
		t.Errorf("generation %d, template generation %q; want 1 and \"1\"", ds.Generation, ds.Annotations[appsv1.DeprecatedTemplateGeneration])
	}
	if !reflect.DeepEqual(ds.Status, appsv1.DaemonSetStatus{}) {
		t.Errorf("status on create = %+v, want empty", ds.Status)
	}

	// OnDelete keeps no rollingUpdate defaults.
	od := testDaemonSet("ondelete")
	od.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	if od, err = ts.client.AppsV1().DaemonSets("default").Create(ctx, od, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if od.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("OnDelete strategy got rollingUpdate %+v", od.Spec.UpdateStrategy.RollingUpdate)
	}
}

// TestDaemonSetValidation: kube-apiserver's rules, with its field paths.
func TestDaemonSetValidation(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	rollingUpdate := func(unavail, surge intstr.IntOrString) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &unavail, MaxSurge: &surge}}
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*appsv1.DaemonSet)
		fields []string // the causes' fields, in any order; nil means valid
	}{
		{"valid", func(*appsv1.DaemonSet) {}, nil},
		{"no selector", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = nil },
			[]string{"spec.selector", "spec.template.metadata.labels"}},
		{"empty selector", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = &metav1.LabelSelector{} },
			[]string{"spec.selector"}},
		{"selector does not match the template", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels = map[string]string{"app": "other"} },
			[]string{"spec.template.metadata.labels"}},
		{"restartPolicy Never", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever },
			[]string{"spec.template.spec.restartPolicy"}},
		{"activeDeadlineSeconds", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.ActiveDeadlineSeconds = ptr(int64(5)) },
			[]string{"spec.template.spec.activeDeadlineSeconds"}},
		{"no containers", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers = nil },
			[]string{"spec.template.spec.containers"}},
		{"bad container name", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Name = "Agent_1" },
			[]string{"spec.template.spec.containers[0].name"}},
		{"unknown strategy", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = "Recreate" },
			[]string{"spec.updateStrategy.type"}},
		{"OnDelete", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType }, nil},
		{"maxUnavailable 25%", rollingUpdate(intstr.FromString("25%"), intstr.FromInt32(0)), nil},
		{"maxSurge instead", rollingUpdate(intstr.FromInt32(0), intstr.FromInt32(1)), nil},
		{"both zero", rollingUpdate(intstr.FromInt32(0), intstr.FromString("0%")),
			[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"both set", rollingUpdate(intstr.FromInt32(1), intstr.FromInt32(1)),
			[]string{"spec.updateStrategy.rollingUpdate.maxSurge"}},
		{"over 100%", rollingUpdate(intstr.FromString("150%"), intstr.FromInt32(0)),
			[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		// Not a number, so zero too: upstream says both.
		{"not a percentage", rollingUpdate(intstr.FromString("half"), intstr.FromInt32(0)),
			[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable", "spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"negative", rollingUpdate(intstr.FromInt32(-1), intstr.FromInt32(0)),
			[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"negative minReadySeconds", func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = -1 },
			[]string{"spec.minReadySeconds"}},
		{"negative revisionHistoryLimit", func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = ptr(int32(-1)) },
			[]string{"spec.revisionHistoryLimit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := testDaemonSet("v")
			tc.mutate(ds)
			_, err := ts.client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if tc.fields == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want Invalid on %v", err, tc.fields)
			}
			got := causeFields(err)
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.fields))
			if !slices.Equal(got, want) {
				t.Errorf("causes on %v, want %v: %v", got, want, err)
			}
		})
	}
}

// TestDaemonSetStrategies: generation and template generation move with
// the spec and the template; a status update keeps the spec and a spec
// update keeps the status (kube-apiserver's strategies); the selector is
// fixed; collisionCount never goes down.
func TestDaemonSetStrategies(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	dsc := ts.client.AppsV1().DaemonSets("default")
	ds, err := dsc.Create(ctx, testDaemonSet("strat"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gens := func(ds *appsv1.DaemonSet) (int64, string) {
		return ds.Generation, ds.Annotations[appsv1.DeprecatedTemplateGeneration]
	}

	// Status: stored, spec kept, generation unchanged.
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 2, ObservedGeneration: 1, CollisionCount: ptr(int32(1))}
	ds.Spec.MinReadySeconds = 30
	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = "9"
	if ds, err = dsc.UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ds.Status.NumberReady != 2 || ds.Spec.MinReadySeconds != 0 {
		t.Errorf("after status update: numberReady %d minReadySeconds %d, want 2 and the stored 0", ds.Status.NumberReady, ds.Spec.MinReadySeconds)
	}
	if g, tg := gens(ds); g != 1 || tg != "1" {
		t.Errorf("after status update: generation %d template generation %s, want 1 and 1", g, tg)
	}

	// Metadata only: no new generation.
	ds.Labels = map[string]string{"tier": "node"}
	if ds, err = dsc.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if g, tg := gens(ds); g != 1 || tg != "1" {
		t.Errorf("after a label change: generation %d template generation %s, want 1 and 1", g, tg)
	}

	// Spec outside the template: generation only; the status stays.
	ds.Spec.MinReadySeconds = 5
	ds.Status = appsv1.DaemonSetStatus{}
	if ds, err = dsc.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if g, tg := gens(ds); g != 2 || tg != "1" {
		t.Errorf("after minReadySeconds: generation %d template generation %s, want 2 and 1", g, tg)
	}
	if ds.Status.NumberReady != 2 {
		t.Errorf("spec update changed the status: %+v", ds.Status)
	}

	// The template, as `kubectl rollout restart` changes it: both.
	patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-01-01T00:00:00Z"}}}}}`)
	if ds, err = dsc.Patch(ctx, "strat", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if g, tg := gens(ds); g != 3 || tg != "2" {
		t.Errorf("after a template change: generation %d template generation %s, want 3 and 2", g, tg)
	}
	// A client cannot set the template generation.
	if ds, err = dsc.Patch(ctx, "strat", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"deprecated.daemonset.template.generation":"42"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, tg := gens(ds); tg != "2" {
		t.Errorf("a client set the template generation to %s", tg)
	}

	// The selector is fixed.
	sel := ds.DeepCopy()
	sel.Spec.Selector.MatchLabels["extra"] = "x"
	sel.Spec.Template.Labels["extra"] = "x"
	if _, err := dsc.Update(ctx, sel, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{"spec.selector"}) {
		t.Errorf("selector change: %v, want Invalid on spec.selector", err)
	}

	// collisionCount never goes down; counts are never negative.
	st := ds.DeepCopy()
	st.Status.CollisionCount = ptr(int32(0))
	st.Status.NumberUnavailable = -1
	_, err = dsc.UpdateStatus(ctx, st, metav1.UpdateOptions{})
	got := causeFields(err)
	slices.Sort(got)
	if !apierrors.IsInvalid(err) || !slices.Equal(got, []string{"status.collisionCount", "status.numberUnavailable"}) {
		t.Errorf("bad status: %v, want Invalid on status.collisionCount and status.numberUnavailable", err)
	}
}

// TestDaemonSetWatchAndList: watches and field-selected lists of the new
// group work as for every resource; deletecollection removes them.
func TestDaemonSetWatchAndList(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	createNamespace(t, ts, "apps")
	dsc := ts.client.AppsV1().DaemonSets("apps")
	list, err := dsc.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := dsc.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, name := range []string{"a", "b"} {
		if _, err := dsc.Create(ctx, testDaemonSet(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dsc.Patch(ctx, "a", types.MergePatchType, []byte(`{"status":{"numberReady":1}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	timeout := time.After(10 * time.Second)
	for len(seen) < 3 {
		select {
		case ev := <-w.ResultChan():
			ds, ok := ev.Object.(*appsv1.DaemonSet)
			if !ok {
				t.Fatalf("watch event %s with %T", ev.Type, ev.Object)
			}
			seen = append(seen, string(ev.Type)+" "+ds.Name)
		case <-timeout:
			t.Fatalf("watch saw only %v", seen)
		}
	}
	if want := []string{"ADDED a", "ADDED b", "MODIFIED a"}; !slices.Equal(seen, want) {
		t.Errorf("watch events %v, want %v", seen, want)
	}
	one, err := dsc.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=b"})
	if err != nil || len(one.Items) != 1 || one.Items[0].Name != "b" {
		t.Errorf("list metadata.name=b: %v %v", err, one)
	}
	if err := dsc.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if left, err := dsc.List(ctx, metav1.ListOptions{}); err != nil || len(left.Items) != 0 {
		t.Errorf("after deletecollection: %v %d left", err, len(left.Items))
	}
	ev := <-w.ResultChan()
	if ev.Type != watch.Deleted {
		t.Errorf("after deletecollection the watch saw %s, want DELETED", ev.Type)
	}
}

// TestControllerRevisions: a revision's data is required and immutable;
// its revision number may change (a rollback renumbers it).
func TestControllerRevisions(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	rc := ts.client.AppsV1().ControllerRevisions("default")
	if _, err := rc.Create(ctx, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, Revision: 1}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!slices.Equal(causeFields(err), []string{"data"}) {
		t.Errorf("revision without data: %v, want Invalid on data", err)
	}
	data := runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace"}}}`)}
	r, err := rc.Create(ctx, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-1"}, Data: data, Revision: 1}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Data.Raw) != string(data.Raw) {
		t.Errorf("data stored as %s, want %s", r.Data.Raw, data.Raw)
	}
	r.Revision = 3
	if r, err = rc.Update(ctx, r, metav1.UpdateOptions{}); err != nil || r.Revision != 3 {
		t.Fatalf("renumbering: %v", err)
	}
	r.Data = runtime.RawExtension{Raw: []byte(`{"spec":{}}`)}
	if _, err := rc.Update(ctx, r, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{"data"}) {
		t.Errorf("changing data: %v, want Invalid on data", err)
	}
}

// TestServiceAccountsAndRBAC: stored as kube-apiserver stores them, with
// its defaults and its validation, and granting nothing.
func TestServiceAccountsAndRBAC(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Rules: []rbacv1.PolicyRule{{Resources: []string{"nodes"}}}}, metav1.CreateOptions{})
	got := causeFields(err)
	slices.Sort(got)
	if !apierrors.IsInvalid(err) || !slices.Equal(got, []string{"rules[0].apiGroups", "rules[0].verbs"}) {
		t.Errorf("rule without verbs and groups: %v", err)
	}
	b, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: "agent"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent", Namespace: "default"}, {Kind: "User", Name: "alice"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.RoleRef.APIGroup != rbacv1.GroupName || b.Subjects[0].APIGroup != "" || b.Subjects[1].APIGroup != rbacv1.GroupName {
		t.Errorf("binding defaults: roleRef %+v subjects %+v", b.RoleRef, b.Subjects)
	}
	b.RoleRef.Name = "other"
	if _, err := c.RbacV1().ClusterRoleBindings().Update(ctx, b, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{"roleRef"}) {
		t.Errorf("changing roleRef: %v, want Invalid on roleRef", err)
	}
	_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "agent"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent"}},
	}, metav1.CreateOptions{})
	got = causeFields(err)
	slices.Sort(got)
	if !apierrors.IsInvalid(err) || !slices.Equal(got, []string{"roleRef.kind", "subjects[0].namespace"}) {
		t.Errorf("cluster binding to a Role, service account without namespace: %v", err)
	}
	if _, err := c.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "r"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "r"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
