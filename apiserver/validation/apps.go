package validation

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DaemonSet validates a DaemonSet on create (ValidateDaemonSet upstream).
func DaemonSet(ds *appsv1.DaemonSet) field.ErrorList {
	allErrs := validateObjectMetaCreate(&ds.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateDaemonSetSpec(&ds.Spec, specPath)...)
	return allErrs
}

// DaemonSetUpdate validates an update of a DaemonSet. The selector is fixed
// once the DaemonSet exists (apps/v1): changing it would orphan the pods
// the old one selected, which the controller could then neither update nor
// remove.
func DaemonSetUpdate(newDS, oldDS *appsv1.DaemonSet) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newDS.ObjectMeta, &oldDS.ObjectMeta)
	allErrs = append(allErrs, validateDaemonSetSpec(&newDS.Spec, specPath)...)
	allErrs = append(allErrs, validateImmutable(newDS.Spec.Selector, oldDS.Spec.Selector, specPath.Child("selector"))...)
	return allErrs
}

// DaemonSetStatusUpdate validates an update through daemonsets/status:
// counts are never negative and collisionCount never goes down (the
// controller names revisions with it; going back could reuse a name).
func DaemonSetStatusUpdate(newDS, oldDS *appsv1.DaemonSet) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newDS.ObjectMeta, &oldDS.ObjectMeta)
	s := &newDS.Status
	for _, c := range []struct {
		name  string
		value int64
	}{
		{"currentNumberScheduled", int64(s.CurrentNumberScheduled)},
		{"numberMisscheduled", int64(s.NumberMisscheduled)},
		{"desiredNumberScheduled", int64(s.DesiredNumberScheduled)},
		{"numberReady", int64(s.NumberReady)},
		{"observedGeneration", s.ObservedGeneration},
		{"updatedNumberScheduled", int64(s.UpdatedNumberScheduled)},
		{"numberAvailable", int64(s.NumberAvailable)},
		{"numberUnavailable", int64(s.NumberUnavailable)},
	} {
		allErrs = append(allErrs, validateNonnegative(c.value, statusPath.Child(c.name))...)
	}
	if s.CollisionCount != nil {
		allErrs = append(allErrs, validateNonnegative(int64(*s.CollisionCount), statusPath.Child("collisionCount"))...)
	}
	if old := oldDS.Status.CollisionCount; old != nil && (s.CollisionCount == nil || *s.CollisionCount < *old) {
		value := int32(0)
		if s.CollisionCount != nil {
			value = *s.CollisionCount
		}
		allErrs = append(allErrs, field.Invalid(statusPath.Child("collisionCount"), value, "cannot be decremented"))
	}
	return allErrs
}

// validateDaemonSetSpec follows ValidateDaemonSetSpec upstream. The pod
// template is validated as a pod spec would be, and must restart its
// containers: a daemon that exits would leave its node without one.
func validateDaemonSetSpec(spec *appsv1.DaemonSetSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	selPath := fldPath.Child("selector")
	if spec.Selector == nil {
		// The openapi schema marks it required, so kubectl normally says so
		// first; the server checks it too.
		allErrs = append(allErrs, field.Required(selPath, ""))
	} else {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, selPath)...)
		if len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0 {
			allErrs = append(allErrs, field.Invalid(selPath, spec.Selector, "empty selector is invalid for daemonset"))
		}
	}
	if sel, err := metav1.LabelSelectorAsSelector(spec.Selector); err == nil && !sel.Matches(labels.Set(spec.Template.Labels)) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("template", "metadata", "labels"), spec.Template.Labels, "`selector` does not match template `labels`"))
	}

	templatePath := fldPath.Child("template")
	allErrs = append(allErrs, validatePodTemplateSpec(&spec.Template, templatePath)...)
	if rp := spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyAlways {
		allErrs = append(allErrs, field.NotSupported(templatePath.Child("spec", "restartPolicy"), rp, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Forbidden(templatePath.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	allErrs = append(allErrs, validateNonnegative(int64(spec.MinReadySeconds), fldPath.Child("minReadySeconds"))...)
	allErrs = append(allErrs, validateDaemonSetUpdateStrategy(&spec.UpdateStrategy, fldPath.Child("updateStrategy"))...)
	if spec.RevisionHistoryLimit != nil {
		// Zero is valid: keep no old revisions.
		allErrs = append(allErrs, validateNonnegative(int64(*spec.RevisionHistoryLimit), fldPath.Child("revisionHistoryLimit"))...)
	}
	return allErrs
}

// validatePodTemplateSpec follows ValidatePodTemplateSpec upstream,
// including its paths: template labels are reported as template.labels.
func validatePodTemplateSpec(t *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	allErrs := validateLabels(t.Labels, fldPath.Child("labels"))
	allErrs = append(allErrs, apimachineryvalidation.ValidateAnnotations(t.Annotations, fldPath.Child("annotations"))...)
	allErrs = append(allErrs, validatePodSpec(&t.Spec, fldPath.Child("spec"))...)
	if len(t.Spec.EphemeralContainers) > 0 {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("spec", "ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	return allErrs
}

// supportedDaemonSetStrategies: an unknown type is reported at
// updateStrategy.type with the type's value; upstream reports the whole
// strategy struct at updateStrategy, which reads worse and says the same.
var supportedDaemonSetStrategies = []appsv1.DaemonSetUpdateStrategyType{appsv1.RollingUpdateDaemonSetStrategyType, appsv1.OnDeleteDaemonSetStrategyType}

func validateDaemonSetUpdateStrategy(s *appsv1.DaemonSetUpdateStrategy, fldPath *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		return nil
	case appsv1.RollingUpdateDaemonSetStrategyType:
		if s.RollingUpdate == nil {
			return field.ErrorList{field.Required(fldPath.Child("rollingUpdate"), "")}
		}
		return validateRollingUpdateDaemonSet(s.RollingUpdate, fldPath.Child("rollingUpdate"))
	}
	return field.ErrorList{field.NotSupported(fldPath.Child("type"), s.Type, supportedDaemonSetStrategies)}
}

// validateRollingUpdateDaemonSet follows ValidateRollingUpdateDaemonSet:
// both values are counts or percentages up to 100%, and exactly one of them
// is non-zero — a rollout either takes a node's daemon down first or runs
// the new one beside it, and with neither it could never progress.
// Defaulting fills both, so nil only arrives from an unset default.
func validateRollingUpdateDaemonSet(ru *appsv1.RollingUpdateDaemonSet, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	unavailPath, surgePath := fldPath.Child("maxUnavailable"), fldPath.Child("maxSurge")
	var unavail, surge intstr.IntOrString
	if ru.MaxUnavailable != nil {
		unavail = *ru.MaxUnavailable
	}
	if ru.MaxSurge != nil {
		surge = *ru.MaxSurge
	}
	allErrs = append(allErrs, validateIntOrPercent(unavail, unavailPath)...)
	allErrs = append(allErrs, validateIntOrPercent(surge, surgePath)...)
	hasUnavailable, hasSurge := intOrPercentValue(unavail) != 0, intOrPercentValue(surge) != 0
	switch {
	case hasUnavailable && hasSurge:
		allErrs = append(allErrs, field.Invalid(surgePath, surge, "may not be set when maxUnavailable is non-zero"))
	case !hasUnavailable && !hasSurge:
		allErrs = append(allErrs, field.Required(unavailPath, "cannot be 0 when maxSurge is 0"))
	}
	return allErrs
}

// validateIntOrPercent follows ValidatePositiveIntOrPercent and
// IsNotMoreThan100Percent: a non-negative integer, or a percentage that is
// at most 100%.
func validateIntOrPercent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	switch v.Type {
	case intstr.String:
		var allErrs field.ErrorList
		for _, msg := range utilvalidation.IsValidPercent(v.StrVal) {
			allErrs = append(allErrs, field.Invalid(fldPath, v, msg))
		}
		if p, ok := percent(v); ok && p > 100 {
			allErrs = append(allErrs, field.Invalid(fldPath, v, "must not be greater than 100%"))
		}
		return allErrs
	case intstr.Int:
		return validateNonnegative(int64(v.IntValue()), fldPath)
	}
	return field.ErrorList{field.Invalid(fldPath, v, "must be an integer or percentage (e.g '5%')")}
}

// percent returns the number of a valid percentage ("25%" → 25).
func percent(v intstr.IntOrString) (int, bool) {
	if v.Type != intstr.String || len(utilvalidation.IsValidPercent(v.StrVal)) > 0 {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	return n, err == nil
}

// intOrPercentValue is the number in v, whether a count or a percentage;
// validation only asks whether it is zero.
func intOrPercentValue(v intstr.IntOrString) int {
	if p, ok := percent(v); ok {
		return p
	}
	return v.IntValue()
}

// ControllerRevision validates a ControllerRevision on create: controllers
// keep an object's history in them, so the data must be present.
func ControllerRevision(r *appsv1.ControllerRevision) field.ErrorList {
	allErrs := validateObjectMetaCreate(&r.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateControllerRevisionBody(r)...)
	return allErrs
}

// ControllerRevisionUpdate validates an update of a ControllerRevision: a
// revision's data is history and never changes (its revision number may:
// controllers renumber a revision they roll back to).
func ControllerRevisionUpdate(newRev, oldRev *appsv1.ControllerRevision) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newRev.ObjectMeta, &oldRev.ObjectMeta)
	allErrs = append(allErrs, validateControllerRevisionBody(newRev)...)
	if !apiequality.Semantic.DeepEqual(newRev.Data.Raw, oldRev.Data.Raw) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), apimachineryvalidation.FieldImmutableErrorMsg))
	}
	return allErrs
}

func validateControllerRevisionBody(r *appsv1.ControllerRevision) field.ErrorList {
	var allErrs field.ErrorList
	if r.Data.Raw == nil && r.Data.Object == nil {
		allErrs = append(allErrs, field.Required(field.NewPath("data"), "data is mandatory"))
	}
	allErrs = append(allErrs, validateNonnegative(r.Revision, field.NewPath("revision"))...)
	return allErrs
}
