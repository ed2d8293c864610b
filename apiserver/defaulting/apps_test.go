package defaulting

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestDaemonSet(t *testing.T) {
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		HostNetwork: true,
		Containers:  []corev1.Container{{Name: "c", Image: "img:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
	}}}}
	DaemonSet(ds)
	eq(t, "strategy", ds.Spec.UpdateStrategy.Type, appsv1.RollingUpdateDaemonSetStrategyType)
	eq(t, "maxUnavailable", *ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable, intstr.FromInt32(1))
	eq(t, "maxSurge", *ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge, intstr.FromInt32(0))
	eq(t, "revisionHistoryLimit", *ds.Spec.RevisionHistoryLimit, int32(10))
	spec := ds.Spec.Template.Spec
	eq(t, "restartPolicy", spec.RestartPolicy, corev1.RestartPolicyAlways)
	eq(t, "hostPort", spec.Containers[0].Ports[0].HostPort, int32(8080))
	if len(spec.Tolerations) != 0 {
		t.Errorf("template tolerations %v: admission defaults are for pods only", spec.Tolerations)
	}

	// Values the client chose stay; OnDelete gets no rolling update.
	pct := intstr.FromString("20%")
	ds = &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{
		RevisionHistoryLimit: ptr(int32(0)),
		UpdateStrategy:       appsv1.DaemonSetUpdateStrategy{RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &pct}},
	}}
	DaemonSet(ds)
	eq(t, "maxUnavailable kept", *ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable, pct)
	eq(t, "revisionHistoryLimit kept", *ds.Spec.RevisionHistoryLimit, int32(0))
	ds = &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}}}
	DaemonSet(ds)
	if ds.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("OnDelete got rollingUpdate %+v", ds.Spec.UpdateStrategy.RollingUpdate)
	}
}

func TestBindings(t *testing.T) {
	b := &rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sa"}, {Kind: "User", Name: "u"}, {Kind: "Group", Name: "g"}},
	}
	ClusterRoleBinding(b)
	eq(t, "roleRef.apiGroup", b.RoleRef.APIGroup, rbacv1.GroupName)
	eq(t, "service account apiGroup", b.Subjects[0].APIGroup, "")
	eq(t, "user apiGroup", b.Subjects[1].APIGroup, rbacv1.GroupName)
	eq(t, "group apiGroup", b.Subjects[2].APIGroup, rbacv1.GroupName)
}
