package validation

import (
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxConfigMapSize is the limit on the summed size of a ConfigMap's values
// (MaxSecretSize upstream): objects are stored in etcd, whose request limit
// is not much larger, and every watcher receives the whole object.
const maxConfigMapSize = 1 * 1024 * 1024

// ConfigMap validates a ConfigMap on create. Keys become file names when
// the ConfigMap is mounted, hence the restricted key syntax.
func ConfigMap(c *corev1.ConfigMap) field.ErrorList {
	allErrs := validateObjectMetaCreate(&c.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateConfigMapData(c)...)
	return allErrs
}

// ConfigMapUpdate validates an update of a ConfigMap. A ConfigMap marked
// immutable cannot have its data changed or the mark removed: consumers
// stop watching immutable ConfigMaps.
func ConfigMapUpdate(newCM, oldCM *corev1.ConfigMap) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newCM.ObjectMeta, &oldCM.ObjectMeta)
	if oldCM.Immutable != nil && *oldCM.Immutable {
		const msg = "field is immutable when `immutable` is set"
		if newCM.Immutable == nil || !*newCM.Immutable {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), msg))
		}
		if !apiequality.Semantic.DeepEqual(newCM.Data, oldCM.Data) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), msg))
		}
		if !apiequality.Semantic.DeepEqual(newCM.BinaryData, oldCM.BinaryData) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("binaryData"), msg))
		}
	}
	allErrs = append(allErrs, validateConfigMapData(newCM)...)
	return allErrs
}

func validateConfigMapData(c *corev1.ConfigMap) field.ErrorList {
	var allErrs field.ErrorList
	dataPath := field.NewPath("data")
	binaryPath := field.NewPath("binaryData")
	total := 0
	for key, value := range c.Data {
		allErrs = append(allErrs, invalid(dataPath.Key(key), key, utilvalidation.IsConfigMapKey(key))...)
		// Both maps end up in the same directory when mounted.
		if _, dup := c.BinaryData[key]; dup {
			allErrs = append(allErrs, field.Invalid(dataPath.Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(value)
	}
	for key, value := range c.BinaryData {
		allErrs = append(allErrs, invalid(binaryPath.Key(key), key, utilvalidation.IsConfigMapKey(key))...)
		total += len(value)
	}
	if total > maxConfigMapSize {
		// The limit is on data and binaryData together; upstream reports it
		// on the object root.
		allErrs = append(allErrs, field.TooLong(field.NewPath(""), "", maxConfigMapSize))
	}
	return allErrs
}

// Lease validates a coordination.k8s.io/v1 Lease on create. Leases carry
// node heartbeats and leader election, so a nonsensical duration would make
// a holder look expired (or never expire).
func Lease(l *coordinationv1.Lease) field.ErrorList {
	allErrs := validateObjectMetaCreate(&l.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateLeaseSpec(&l.Spec)...)
	return allErrs
}

// LeaseUpdate validates an update of a Lease.
func LeaseUpdate(newLease, oldLease *coordinationv1.Lease) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newLease.ObjectMeta, &oldLease.ObjectMeta)
	allErrs = append(allErrs, validateLeaseSpec(&newLease.Spec)...)
	return allErrs
}

func validateLeaseSpec(spec *coordinationv1.LeaseSpec) field.ErrorList {
	var allErrs field.ErrorList
	if spec.LeaseDurationSeconds != nil && *spec.LeaseDurationSeconds <= 0 {
		allErrs = append(allErrs, field.Invalid(specPath.Child("leaseDurationSeconds"), *spec.LeaseDurationSeconds, "must be greater than 0"))
	}
	if spec.LeaseTransitions != nil && *spec.LeaseTransitions < 0 {
		allErrs = append(allErrs, field.Invalid(specPath.Child("leaseTransitions"), *spec.LeaseTransitions, "must be greater than or equal to 0"))
	}
	strategyPath := specPath.Child("strategy")
	if spec.Strategy != nil {
		s := string(*spec.Strategy)
		if errs := validateQualifiedName(s, strategyPath); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
		} else if !strings.Contains(s, "/") && *spec.Strategy != coordinationv1.OldestEmulationVersion {
			// Unprefixed strategy names are reserved for Kubernetes.
			allErrs = append(allErrs, field.NotSupported(strategyPath, *spec.Strategy,
				[]coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion}))
		}
	}
	if spec.PreferredHolder != nil && *spec.PreferredHolder != "" && (spec.Strategy == nil || *spec.Strategy == "") {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("preferredHolder"), "may only be specified if `strategy` is defined"))
	}
	return allErrs
}

// Event field limits of events.k8s.io/v1 (upstream's *LengthLimit).
const (
	eventReportingInstanceMaxLen = 128
	eventActionMaxLen            = 128
	eventReasonMaxLen            = 128
	eventNoteMaxLen              = 1024
)

var supportedEventTypes = []string{corev1.EventTypeNormal, corev1.EventTypeWarning}

// CoreEvent validates a core/v1 Event on create. The v1 API has always been
// lenient (old recorders send sparse events), so this follows upstream's
// "legacy" rules: the event lives in the namespace of the object it is
// about (cluster-scoped objects' events go to "default"), and events in the
// new style (eventTime set) must say who reported them and what happened.
// type, when set, must be Normal or Warning - consumers treat anything else
// as unknown.
func CoreEvent(e *corev1.Event) field.ErrorList {
	allErrs := validateObjectMetaCreate(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateCoreEventBody(e)...)
	return allErrs
}

// CoreEventUpdate validates an update of a core/v1 Event (recorders update
// count and lastTimestamp of repeated events).
func CoreEventUpdate(newEvent, oldEvent *corev1.Event) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newEvent.ObjectMeta, &oldEvent.ObjectMeta)
	allErrs = append(allErrs, validateCoreEventBody(newEvent)...)
	return allErrs
}

func validateCoreEventBody(e *corev1.Event) field.ErrorList {
	var allErrs field.ErrorList
	involvedNSPath := field.NewPath("involvedObject", "namespace")
	allErrs = append(allErrs, validateOptionalNamespace(e.InvolvedObject.Namespace, involvedNSPath)...)

	if e.EventTime.IsZero() {
		if e.InvolvedObject.Namespace == "" {
			if e.Namespace != metav1.NamespaceDefault {
				allErrs = append(allErrs, field.Invalid(involvedNSPath, e.InvolvedObject.Namespace, "does not match event.namespace"))
			}
		} else if e.Namespace != e.InvolvedObject.Namespace {
			allErrs = append(allErrs, field.Invalid(involvedNSPath, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
	} else {
		if e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
			allErrs = append(allErrs, field.Invalid(involvedNSPath, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		allErrs = append(allErrs, validateEventReporting(e.ReportingController, e.ReportingInstance, e.Action, e.Reason, e.Message,
			field.NewPath("reportingComponent"), field.NewPath("reportingInstance"), field.NewPath("action"), field.NewPath("reason"), field.NewPath("message"))...)
	}

	if e.Type != "" && !containsValue(supportedEventTypes, e.Type) {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("type"), e.Type, supportedEventTypes))
	}
	if e.EventTime.IsZero() && len(e.Reason) > eventReasonMaxLen {
		// New-style events get this check from validateEventReporting.
		allErrs = append(allErrs, field.TooLong(field.NewPath("reason"), "", eventReasonMaxLen))
	}
	allErrs = append(allErrs, validateNonnegative(int64(e.Count), field.NewPath("count"))...)
	return allErrs
}

// validateEventReporting holds the checks shared by new-style core/v1 events
// and events.k8s.io/v1 events.
func validateEventReporting(controller, instance, action, reason, note string, controllerPath, instancePath, actionPath, reasonPath, notePath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if controller == "" {
		allErrs = append(allErrs, field.Required(controllerPath, ""))
	} else {
		allErrs = append(allErrs, validateQualifiedName(controller, controllerPath)...)
	}
	if instance == "" {
		allErrs = append(allErrs, field.Required(instancePath, ""))
	} else if len(instance) > eventReportingInstanceMaxLen {
		allErrs = append(allErrs, field.TooLong(instancePath, "", eventReportingInstanceMaxLen))
	}
	if action == "" {
		allErrs = append(allErrs, field.Required(actionPath, ""))
	} else if len(action) > eventActionMaxLen {
		allErrs = append(allErrs, field.TooLong(actionPath, "", eventActionMaxLen))
	}
	if reason == "" {
		allErrs = append(allErrs, field.Required(reasonPath, ""))
	} else if len(reason) > eventReasonMaxLen {
		allErrs = append(allErrs, field.TooLong(reasonPath, "", eventReasonMaxLen))
	}
	if len(note) > eventNoteMaxLen {
		allErrs = append(allErrs, field.TooLong(notePath, "", eventNoteMaxLen))
	}
	return allErrs
}

// EventsV1Event validates an events.k8s.io/v1 Event on create, with the
// strict rules upstream applies to that API: eventTime, type, reason,
// action and the reporter are required, the deprecated core/v1 fields must
// be unset, and series (for repeated events) must be sane.
func EventsV1Event(e *eventsv1.Event) field.ErrorList {
	allErrs := validateObjectMetaCreate(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateEventsV1Body(e)...)
	allErrs = append(allErrs, validateEventSeries(e.Series)...)
	return allErrs
}

// EventsV1EventUpdate validates an update of an events.k8s.io/v1 Event.
// Only series (and metadata) may change: an event records one occurrence,
// repeats are counted in series.
func EventsV1EventUpdate(newEvent, oldEvent *eventsv1.Event) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newEvent.ObjectMeta, &oldEvent.ObjectMeta)
	allErrs = append(allErrs, validateEventsV1Body(newEvent)...)
	if !apiequality.Semantic.DeepEqual(newEvent.Series, oldEvent.Series) {
		allErrs = append(allErrs, validateEventSeries(newEvent.Series)...)
	}
	for _, f := range []struct {
		name     string
		new, old interface{}
	}{
		{"regarding", newEvent.Regarding, oldEvent.Regarding},
		{"related", newEvent.Related, oldEvent.Related},
		{"reason", newEvent.Reason, oldEvent.Reason},
		{"note", newEvent.Note, oldEvent.Note},
		{"type", newEvent.Type, oldEvent.Type},
		{"eventTime", newEvent.EventTime, oldEvent.EventTime},
		{"action", newEvent.Action, oldEvent.Action},
		{"reportingController", newEvent.ReportingController, oldEvent.ReportingController},
		{"reportingInstance", newEvent.ReportingInstance, oldEvent.ReportingInstance},
		{"deprecatedSource", newEvent.DeprecatedSource, oldEvent.DeprecatedSource},
		{"deprecatedFirstTimestamp", newEvent.DeprecatedFirstTimestamp, oldEvent.DeprecatedFirstTimestamp},
		{"deprecatedLastTimestamp", newEvent.DeprecatedLastTimestamp, oldEvent.DeprecatedLastTimestamp},
		{"deprecatedCount", newEvent.DeprecatedCount, oldEvent.DeprecatedCount},
	} {
		allErrs = append(allErrs, validateImmutable(f.new, f.old, field.NewPath(f.name))...)
	}
	return allErrs
}

func validateEventsV1Body(e *eventsv1.Event) field.ErrorList {
	var allErrs field.ErrorList

	if e.EventTime.IsZero() {
		allErrs = append(allErrs, field.Required(field.NewPath("eventTime"), ""))
	}

	typePath := field.NewPath("type")
	switch {
	case e.Type == "":
		allErrs = append(allErrs, field.Required(typePath, ""))
	case !containsValue(supportedEventTypes, e.Type):
		allErrs = append(allErrs, field.NotSupported(typePath, e.Type, supportedEventTypes))
	}

	regardingNSPath := field.NewPath("regarding", "namespace")
	allErrs = append(allErrs, validateOptionalNamespace(e.Regarding.Namespace, regardingNSPath)...)
	// Events about cluster-scoped objects go to "default" or "kube-system".
	if e.Regarding.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
		allErrs = append(allErrs, field.Invalid(regardingNSPath, e.Regarding.Namespace, "does not match event.namespace"))
	}

	allErrs = append(allErrs, validateEventReporting(e.ReportingController, e.ReportingInstance, e.Action, e.Reason, e.Note,
		field.NewPath("reportingController"), field.NewPath("reportingInstance"), field.NewPath("action"), field.NewPath("reason"), field.NewPath("note"))...)

	const unset = "needs to be unset"
	if !e.DeprecatedFirstTimestamp.IsZero() {
		allErrs = append(allErrs, field.Invalid(field.NewPath("deprecatedFirstTimestamp"), e.DeprecatedFirstTimestamp, unset))
	}
	if !e.DeprecatedLastTimestamp.IsZero() {
		allErrs = append(allErrs, field.Invalid(field.NewPath("deprecatedLastTimestamp"), e.DeprecatedLastTimestamp, unset))
	}
	if e.DeprecatedCount != 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("deprecatedCount"), e.DeprecatedCount, unset))
	}
	if e.DeprecatedSource.Component != "" || e.DeprecatedSource.Host != "" {
		allErrs = append(allErrs, field.Invalid(field.NewPath("deprecatedSource"), e.DeprecatedSource, unset))
	}
	return allErrs
}

func validateEventSeries(series *eventsv1.EventSeries) field.ErrorList {
	if series == nil {
		return nil
	}
	var allErrs field.ErrorList
	seriesPath := field.NewPath("series")
	if series.Count < 2 {
		allErrs = append(allErrs, field.Invalid(seriesPath.Child("count"), series.Count, fmt.Sprintf("should be at least %d", 2)))
	}
	if series.LastObservedTime.IsZero() {
		allErrs = append(allErrs, field.Required(seriesPath.Child("lastObservedTime"), ""))
	}
	return allErrs
}
