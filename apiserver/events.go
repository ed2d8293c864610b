package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// Events are stored once, as core/v1 Events, and events.k8s.io/v1 serves
// the same objects converted, as kube-apiserver does: an event written
// through one API (kube-proxy and the scheduler write events.k8s.io/v1,
// older recorders and kubectl read core/v1) is visible through the other.

// eventToV1 converts a stored core/v1 Event to its events.k8s.io/v1 view.
func eventToV1(o runtime.Object) runtime.Object {
	e := o.(*corev1.Event)
	out := &eventsv1.Event{
		TypeMeta:                 eventsV1TypeMeta,
		ObjectMeta:               *e.ObjectMeta.DeepCopy(),
		EventTime:                e.EventTime,
		ReportingController:      e.ReportingController,
		ReportingInstance:        e.ReportingInstance,
		Action:                   e.Action,
		Reason:                   e.Reason,
		Regarding:                e.InvolvedObject,
		Related:                  e.Related.DeepCopy(),
		Note:                     e.Message,
		Type:                     e.Type,
		DeprecatedSource:         e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp,
		DeprecatedLastTimestamp:  e.LastTimestamp,
		DeprecatedCount:          e.Count,
	}
	if e.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return out
}

// eventFromV1 converts an events.k8s.io/v1 Event to the stored core/v1 form.
func eventFromV1(o runtime.Object) runtime.Object {
	e := o.(*eventsv1.Event)
	out := &corev1.Event{
		TypeMeta:            coreEventTypeMeta,
		ObjectMeta:          *e.ObjectMeta.DeepCopy(),
		InvolvedObject:      e.Regarding,
		Related:             e.Related.DeepCopy(),
		Reason:              e.Reason,
		Message:             e.Note,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
		Type:                e.Type,
		EventTime:           e.EventTime,
		Action:              e.Action,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
	}
	if e.Series != nil {
		out.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return out
}

var (
	eventsV1TypeMeta   = metav1.TypeMeta{Kind: "Event", APIVersion: eventsV1.String()}
	coreEventTypeMeta  = metav1.TypeMeta{Kind: "Event", APIVersion: coreV1.String()}
	eventsV1FieldNames = map[string]string{
		// events.k8s.io/v1 field label → core/v1 field label, upstream's
		// conversion of field selectors for events.k8s.io.
		"regarding.kind":            "involvedObject.kind",
		"regarding.namespace":       "involvedObject.namespace",
		"regarding.name":            "involvedObject.name",
		"regarding.uid":             "involvedObject.uid",
		"regarding.apiVersion":      "involvedObject.apiVersion",
		"regarding.resourceVersion": "involvedObject.resourceVersion",
		"regarding.fieldPath":       "involvedObject.fieldPath",
		"reportingController":       "reportingComponent",
		"reason":                    "reason",
		"source":                    "source",
		"type":                      "type",
	}
)

// eventsV1Fields are the field labels of events.k8s.io/v1, computed from the
// stored core/v1 Event (selectors always look at stored objects).
func eventsV1Fields(o runtime.Object) fields.Set {
	core := coreEventFields(o)
	set := make(fields.Set, len(eventsV1FieldNames))
	for v1Name, coreName := range eventsV1FieldNames {
		set[v1Name] = core[coreName]
	}
	return set
}

// migrateEventsV1 moves events that earlier versions of this server stored
// apart, under <prefix>/events.k8s.io/events/, to the core Events' prefix,
// so that they stay visible. An event whose name is taken in core is left
// where it is (and logged): nothing is overwritten.
func migrateEventsV1(ctx context.Context, client *clientv3.Client, prefix string, log *slog.Logger) error {
	oldPrefix, newPrefix := prefix+"/events.k8s.io/events/", prefix+"/events/"
	resp, err := client.Get(ctx, oldPrefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read %s: %w", oldPrefix, err)
	}
	for _, kv := range resp.Kvs {
		oldKey := string(kv.Key)
		var e eventsv1.Event
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return fmt.Errorf("decode %s: %w", oldKey, err)
		}
		core := eventFromV1(&e).(*corev1.Event)
		core.ResourceVersion = ""
		data, err := json.Marshal(core)
		if err != nil {
			return fmt.Errorf("encode %s: %w", oldKey, err)
		}
		newKey := newPrefix + strings.TrimPrefix(oldKey, oldPrefix)
		txn, err := client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(newKey), "=", 0), clientv3.Compare(clientv3.ModRevision(oldKey), "=", kv.ModRevision)).
			Then(clientv3.OpPut(newKey, string(data)), clientv3.OpDelete(oldKey)).
			Commit()
		if err != nil {
			return fmt.Errorf("move %s to %s: %w", oldKey, newKey, err)
		}
		if !txn.Succeeded {
			log.Warn("events.k8s.io event not migrated: its name is taken by a core event (or it changed meanwhile)", "key", oldKey)
			continue
		}
		log.Info("migrated events.k8s.io event to the shared events storage", "from", oldKey, "to", newKey)
	}
	return nil
}
