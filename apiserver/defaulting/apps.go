package defaulting

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// defaultRevisionHistoryLimit is how many old ControllerRevisions a
// DaemonSet keeps when it does not say (SetDefaults_DaemonSet).
const defaultRevisionHistoryLimit int32 = 10

// DaemonSet sets the defaults kube-apiserver applies to a DaemonSet: a
// RollingUpdate strategy that replaces one node's pod at a time (maxSurge
// 0), a history of ten revisions, and the pod defaults on its template.
func DaemonSet(ds *appsv1.DaemonSet) {
	s := &ds.Spec.UpdateStrategy
	setDefault(&s.Type, appsv1.RollingUpdateDaemonSetStrategyType)
	if s.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		setDefaultPtr(&s.RollingUpdate, appsv1.RollingUpdateDaemonSet{})
		setDefaultPtr(&s.RollingUpdate.MaxUnavailable, intstr.FromInt32(1))
		setDefaultPtr(&s.RollingUpdate.MaxSurge, intstr.FromInt32(0))
	}
	setDefaultPtr(&ds.Spec.RevisionHistoryLimit, defaultRevisionHistoryLimit)
	podSpec(&ds.Spec.Template.Spec)
}
