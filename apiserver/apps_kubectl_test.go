package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// nodenetManifest is the DaemonSet manifest users apply; the local cluster
// applies the same file.
const nodenetManifest = "../daemonset/nodenet.yaml"

// TestKubectlDaemonSet drives the real clients through what an operator does
// with nodenet's own manifest: apply it, watch the rollout, restart it, look
// at its history, delete it. The status a controller would write is set by
// the test, so only the server is under test here.
func TestKubectlDaemonSet(t *testing.T) {
	bins := kubectlBinaries(t)
	for _, v := range kubectlVersions {
		bin := bins[v]
		t.Run("v"+v, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t) // the manifest has fixed names: one server per client
			testKubectlDaemonSet(t, ts, newKubectl(t, bin, ts.KubeconfigPath()))
		})
	}
}

func testKubectlDaemonSet(t *testing.T, ts *testServer, k *kubectlCmd) {
	ctx := ctxT(t)
	const ns = "nodenet-system"
	dsc := ts.client.AppsV1().DaemonSets(ns)

	t.Run("api-resources", func(t *testing.T) {
		wantAPIResources(t, k.ok(t, "api-resources"), []apiResourceRow{
			{"daemonsets", "apps/v1", "true", "DaemonSet", "ds"},
			{"controllerrevisions", "apps/v1", "true", "ControllerRevision", ""},
			{"serviceaccounts", "v1", "true", "ServiceAccount", "sa"},
			{"clusterroles", "rbac.authorization.k8s.io/v1", "false", "ClusterRole", ""},
			{"clusterrolebindings", "rbac.authorization.k8s.io/v1", "false", "ClusterRoleBinding", ""},
			{"roles", "rbac.authorization.k8s.io/v1", "true", "Role", ""},
			{"rolebindings", "rbac.authorization.k8s.io/v1", "true", "RoleBinding", ""},
		})
	})

	objects := func(verb string) []string {
		return []string{
			"namespace/nodenet-system " + verb,
			"serviceaccount/nodenet " + verb,
			"clusterrole.rbac.authorization.k8s.io/nodenet " + verb,
			"clusterrolebinding.rbac.authorization.k8s.io/nodenet " + verb,
			"configmap/nodenet-config " + verb,
			"daemonset.apps/nodenet " + verb,
		}
	}
	t.Run("apply", func(t *testing.T) {
		wantLines(t, "first apply", k.ok(t, "apply", "-f", nodenetManifest), objects("created")...)
		wantLines(t, "second apply", k.ok(t, "apply", "-f", nodenetManifest), objects("unchanged")...)
	})
	if t.Failed() {
		t.FailNow()
	}
	ds, err := dsc.Get(ctx, "nodenet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("get", func(t *testing.T) {
		out := k.ok(t, "get", "ds", "-n", ns)
		wantColumns(t, "get ds", out, "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE")
		r := kubectlRow(t, out, "NAME", "nodenet")
		if r["DESIRED"] != "0" || r["AVAILABLE"] != "0" || r["NODE SELECTOR"] != "<none>" {
			t.Errorf("get ds row = %v, want 0 desired, 0 available, no node selector", r)
		}
		out = k.ok(t, "get", "daemonsets", "-n", ns, "-o", "wide")
		wantColumns(t, "get ds -o wide", out, "CONTAINERS", "IMAGES", "SELECTOR")
		r = kubectlRow(t, out, "NAME", "nodenet")
		if r["CONTAINERS"] != "flanneld,proxy" || r["SELECTOR"] != "app.kubernetes.io/name=nodenet" {
			t.Errorf("get ds -o wide row = %v", r)
		}
		// "all" includes DaemonSets, as upstream (the only kind here, so
		// kubectl prints the plain name).
		out = k.ok(t, "get", "all", "-n", ns)
		wantColumns(t, "get all", out, "NAME", "DESIRED", "NODE SELECTOR")
		if r := kubectlRow(t, out, "DESIRED", "0"); !strings.HasSuffix(r["NAME"], "nodenet") {
			t.Errorf("get all: row %v, want the DaemonSet nodenet", r)
		}
	})

	setStatus := func(updated, available int32) {
		t.Helper()
		cur, err := dsc.Get(ctx, "nodenet", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = appsv1.DaemonSetStatus{
			ObservedGeneration: cur.Generation, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3,
			NumberReady: available, NumberAvailable: available, NumberUnavailable: 3 - available, UpdatedNumberScheduled: updated,
		}
		if _, err := dsc.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("rollout status", func(t *testing.T) {
		setStatus(2, 2)
		out := k.ok(t, "rollout", "status", "daemonset/nodenet", "-n", ns, "--watch=false")
		wantContains(t, "rollout status (in progress)", out, `Waiting for daemon set "nodenet" rollout to finish: 2 out of 3 new pods have been updated...`)

		// A watching `rollout status` ends when the status says done.
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var stdout, stderr nettest.Buffer
		cmd := k.command(wctx, "rollout", "status", "daemonset/nodenet", "-n", ns)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitFor := func(what string) {
			t.Helper()
			deadline := time.After(10 * time.Second)
			for !strings.Contains(stdout.String(), what) {
				select {
				case err := <-done:
					t.Fatalf("rollout status exited (%v) before %q\nstdout:\n%s\nstderr:\n%s", err, what, stdout.String(), stderr.String())
				case <-deadline:
					t.Fatalf("rollout status: %q not seen\nstdout:\n%s\nstderr:\n%s", what, stdout.String(), stderr.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		waitFor("2 out of 3 new pods have been updated")
		setStatus(3, 2)
		waitFor("2 of 3 updated pods are available")
		setStatus(3, 3)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("rollout status: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
		case <-wctx.Done():
			t.Fatalf("rollout status did not finish\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
		wantContains(t, "rollout status (done)", stdout.String(), `daemon set "nodenet" successfully rolled out`)
	})

	t.Run("rollout restart", func(t *testing.T) {
		wantLines(t, "rollout restart", k.ok(t, "rollout", "restart", "daemonset/nodenet", "-n", ns), "daemonset.apps/nodenet restarted")
		after, err := dsc.Get(ctx, "nodenet", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" || after.Generation != ds.Generation+1 ||
			after.Annotations[appsv1.DeprecatedTemplateGeneration] != "2" {
			t.Errorf("after rollout restart: generation %d, template annotations %v, template generation %s; want %d, restartedAt, 2",
				after.Generation, after.Spec.Template.Annotations, after.Annotations[appsv1.DeprecatedTemplateGeneration], ds.Generation+1)
		}
		out := k.ok(t, "rollout", "status", "daemonset/nodenet", "-n", ns, "--watch=false")
		wantContains(t, "rollout status after restart", out, "Waiting for daemon set spec update to be observed...")
	})

	t.Run("rollout history", func(t *testing.T) {
		// What the DaemonSet controller records: a revision owned by the
		// DaemonSet, labelled so that its selector finds it.
		rev := &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "nodenet-abc", Labels: map[string]string{"app.kubernetes.io/name": "nodenet", "controller-revision-hash": "abc"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
			Data:     runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace"}}}`)},
			Revision: 1,
		}
		if _, err := ts.client.AppsV1().ControllerRevisions(ns).Create(ctx, rev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out := k.ok(t, "get", "controllerrevisions", "-n", ns)
		wantColumns(t, "get controllerrevisions", out, "NAME", "CONTROLLER", "REVISION", "AGE")
		if r := kubectlRow(t, out, "NAME", "nodenet-abc"); r["CONTROLLER"] != "daemonset.apps/nodenet" || r["REVISION"] != "1" {
			t.Errorf("get controllerrevisions row = %v", r)
		}
		out = k.ok(t, "rollout", "history", "daemonset/nodenet", "-n", ns)
		title, out, _ := strings.Cut(out, "\n")
		if strings.TrimSpace(title) != "daemonset.apps/nodenet" {
			t.Errorf("rollout history title = %q, want daemonset.apps/nodenet", title)
		}
		wantColumns(t, "rollout history", out, "REVISION", "CHANGE-CAUSE")
		kubectlRow(t, out, "REVISION", "1")
	})

	t.Run("delete", func(t *testing.T) {
		// The namespace goes first and takes the namespaced objects with it,
		// perhaps before kubectl asks for them: hence --ignore-not-found.
		out := k.ok(t, "delete", "-f", nodenetManifest, "--ignore-not-found", "--timeout", "15s")
		wantLines(t, "delete -f", out, `namespace "nodenet-system" deleted`, `clusterrole.rbac.authorization.k8s.io "nodenet" deleted`,
			`clusterrolebinding.rbac.authorization.k8s.io "nodenet" deleted`)
		testapi.Eventually(t, 10*time.Second, "the DaemonSet and its revision gone with the namespace", func() bool {
			dss, err1 := dsc.List(ctx, metav1.ListOptions{})
			revs, err2 := ts.client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
			return err1 == nil && err2 == nil && len(dss.Items) == 0 && len(revs.Items) == 0
		})
	})
}
