package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// The node daemons (flanneld, the proxy, the CNI plugin's installer) are
// not started by `up`: it applies the DaemonSet manifest users apply to a
// real cluster (Config.Daemons: `nodenet up` renders daemonset/manifest
// with the cluster's backend and proxy mode; this package imports no
// daemon package) and the agents run its pods, so every `nodenet up` and
// `make run` exercises that manifest.

// daemonSet is the DaemonSet among the node daemon objects.
func (c Config) daemonSet() *appsv1.DaemonSet {
	for _, obj := range c.Daemons {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			return ds
		}
	}
	return nil
}

// applyObjects creates each object, or updates it when it exists (a
// state directory re-used by `up` starts from an empty API server, so
// that is only for callers applying twice).
func applyObjects(ctx context.Context, cs kubernetes.Interface, objs []runtime.Object) error {
	for _, obj := range objs {
		if err := applyObject(ctx, cs, obj); err != nil {
			return err
		}
	}
	return nil
}

func applyObject(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	var err error
	var what string
	co := metav1.CreateOptions{FieldManager: "nodenet-up"}
	uo := metav1.UpdateOptions{FieldManager: "nodenet-up"}
	switch o := obj.(type) {
	case *corev1.Namespace:
		what = "namespace/" + o.Name
		_, err = cs.CoreV1().Namespaces().Create(ctx, o, co)
	case *corev1.ServiceAccount:
		what = "serviceaccount/" + o.Name
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, co)
	case *rbacv1.ClusterRole:
		what = "clusterrole/" + o.Name
		if _, err = cs.RbacV1().ClusterRoles().Create(ctx, o, co); apierrors.IsAlreadyExists(err) {
			_, err = cs.RbacV1().ClusterRoles().Update(ctx, o, uo)
		}
	case *rbacv1.ClusterRoleBinding:
		what = "clusterrolebinding/" + o.Name
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, co)
	case *corev1.ConfigMap:
		what = "configmap/" + o.Name
		if _, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, co); apierrors.IsAlreadyExists(err) {
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Update(ctx, o, uo)
		}
	case *appsv1.DaemonSet:
		what = "daemonset/" + o.Name
		if _, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, co); apierrors.IsAlreadyExists(err) {
			var cur *appsv1.DaemonSet
			if cur, err = cs.AppsV1().DaemonSets(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
				o.ResourceVersion = cur.ResourceVersion
				_, err = cs.AppsV1().DaemonSets(o.Namespace).Update(ctx, o, uo)
			}
		}
	default:
		return fmt.Errorf("apply: no client for %T", obj)
	}
	// Namespaces, accounts and bindings that exist are as wanted: the
	// manifest names them only.
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	return nil
}

// DeployDaemons applies the node daemon objects (Config.Daemons).
func (c *Cluster) DeployDaemons(ctx context.Context, cs kubernetes.Interface) error {
	return applyObjects(ctx, cs, c.cfg.Daemons)
}

// DaemonSet is the namespace and name of the node daemons' DaemonSet.
func (c *Cluster) DaemonSet() (namespace, name string) {
	ds := c.cfg.daemonSet()
	return ds.Namespace, ds.Name
}

// WaitDaemonSet waits until the nodenet DaemonSet has a ready pod of its
// current template on each of nodes nodes, as `kubectl rollout status`
// judges it; readiness is the containers' readiness probes (flanneld's
// /readyz, the proxy's /healthz), run by the agents.
func WaitDaemonSet(ctx context.Context, cs kubernetes.Interface, ns, name string, nodes int, timeout time.Duration) (*appsv1.DaemonSet, error) {
	deadline := time.Now().Add(timeout)
	for {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		why := ""
		switch {
		case err != nil:
			why = err.Error()
		case ds.Status.ObservedGeneration < ds.Generation:
			why = "controller has not observed the latest spec"
		case int(ds.Status.DesiredNumberScheduled) != nodes:
			why = fmt.Sprintf("%d of %d nodes scheduled", ds.Status.DesiredNumberScheduled, nodes)
		case ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled || ds.Status.NumberAvailable != ds.Status.DesiredNumberScheduled:
			why = fmt.Sprintf("%d updated, %d available of %d", ds.Status.UpdatedNumberScheduled, ds.Status.NumberAvailable, ds.Status.DesiredNumberScheduled)
		default:
			return ds, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("DaemonSet %s/%s not ready after %s: %s%s", ns, name, timeout, why, podsNotReady(ctx, cs, ds))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podsNotReady says which of the DaemonSet's pods are not ready and why,
// for an error message.
func podsNotReady(ctx context.Context, cs kubernetes.Interface, ds *appsv1.DaemonSet) string {
	if ds == nil || ds.Spec.Selector == nil {
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return ""
	}
	pods, err := cs.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return ""
	}
	var out []string
	for _, p := range pods.Items {
		if podReady(&p) {
			continue
		}
		var states []string
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			switch {
			case s.State.Waiting != nil:
				states = append(states, fmt.Sprintf("%s waiting (%s: %s)", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message))
			case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
				states = append(states, fmt.Sprintf("%s exited %d", s.Name, s.State.Terminated.ExitCode))
			case s.State.Running != nil && !s.Ready:
				states = append(states, s.Name+" running, not ready")
			}
		}
		out = append(out, fmt.Sprintf("%s on %s: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, strings.Join(states, ", ")))
	}
	if len(out) == 0 {
		return ""
	}
	return "; pods: " + strings.Join(out, "; ")
}

// errNoPortmap is why a machine without the portmap plugin cannot run the
// manifest's conflist.
var errNoPortmap = errors.New("the portmap CNI plugin (in the manifest's conflist, for hostPort) is not installed: apt-get install containernetworking-plugins, or make deps")
