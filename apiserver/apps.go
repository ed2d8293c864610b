package apiserver

// apps/v1 DaemonSets and ControllerRevisions: what a node-level component
// is deployed with (nodenet's own daemonset/nodenet.yaml among them), and
// the revision history the DaemonSet controller keeps for `kubectl rollout`.

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodenet/nodenet/apiserver/defaulting"
	"github.com/nodenet/nodenet/apiserver/validation"
)

var appsV1 = appsv1.SchemeGroupVersion

func appsResources() []*resource {
	return []*resource{
		{
			gv: appsV1, plural: "daemonsets", singular: "daemonset", kind: "DaemonSet", shortNames: []string{"ds"}, categories: []string{"all"},
			namespaced: true, hasStatus: true,
			newObj:   func() runtime.Object { return &appsv1.DaemonSet{} },
			newList:  func() runtime.Object { return &appsv1.DaemonSetList{} },
			defaults: typedDefault(defaulting.DaemonSet),
			prepareCreate: func(o runtime.Object) {
				resetStatus(o)
				setTemplateGeneration(o.(*appsv1.DaemonSet), 1)
			},
			prepareUpdate: daemonSetPrepareUpdate,
			validate:      typed(validation.DaemonSet), validateUpd: typed2(validation.DaemonSetUpdate),
			validateStat: typed2(validation.DaemonSetStatusUpdate),
			prepareStatus: func(obj, old runtime.Object) {
				ds, o := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
				setTemplateGeneration(ds, templateGeneration(o))
			},
			columns: daemonSetColumns,
		},
		{
			gv: appsV1, plural: "controllerrevisions", singular: "controllerrevision", kind: "ControllerRevision",
			namespaced: true,
			newObj:     func() runtime.Object { return &appsv1.ControllerRevision{} },
			newList:    func() runtime.Object { return &appsv1.ControllerRevisionList{} },
			validate:   typed(validation.ControllerRevision), validateUpd: typed2(validation.ControllerRevisionUpdate),
			columns: controllerRevisionColumns,
		},
	}
}

// The template generation counts changes of spec.template, starting at 1.
// kube-apiserver keeps it in this annotation on apps/v1 (the field it once
// was is gone from the API); the DaemonSet controller labels pods with it
// (pod-template-generation). It belongs to the server: what a client sends
// is replaced.
func templateGeneration(ds *appsv1.DaemonSet) int64 {
	g, _ := strconv.ParseInt(ds.Annotations[appsv1.DeprecatedTemplateGeneration], 10, 64)
	return g
}

func setTemplateGeneration(ds *appsv1.DaemonSet, g int64) {
	if g == 0 {
		// Stored before the server kept the annotation: leave it unset
		// rather than invent a history.
		delete(ds.Annotations, appsv1.DeprecatedTemplateGeneration)
		return
	}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = strconv.FormatInt(g, 10)
}

// daemonSetPrepareUpdate is the part of kube-apiserver's DaemonSet strategy
// beyond keeping the status: a changed template is a new template
// generation.
func daemonSetPrepareUpdate(obj, old runtime.Object) {
	ds, o := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	g := templateGeneration(o)
	if g != 0 && !apiequality.Semantic.DeepEqual(ds.Spec.Template, o.Spec.Template) {
		g++
	}
	setTemplateGeneration(ds, g)
}

// daemonSetColumns are kube-apiserver's DaemonSet columns.
func daemonSetColumns() []column {
	ds := func(o runtime.Object) *appsv1.DaemonSet { return o.(*appsv1.DaemonSet) }
	count := func(name string, f func(*appsv1.DaemonSetStatus) int32) column {
		return column{name: name, typ: "integer", cell: func(o runtime.Object) any { return int64(f(&ds(o).Status)) }}
	}
	return []column{nameCol(),
		count("Desired", func(s *appsv1.DaemonSetStatus) int32 { return s.DesiredNumberScheduled }),
		count("Current", func(s *appsv1.DaemonSetStatus) int32 { return s.CurrentNumberScheduled }),
		count("Ready", func(s *appsv1.DaemonSetStatus) int32 { return s.NumberReady }),
		count("Up-to-date", func(s *appsv1.DaemonSetStatus) int32 { return s.UpdatedNumberScheduled }),
		count("Available", func(s *appsv1.DaemonSetStatus) int32 { return s.NumberAvailable }),
		{name: "Node Selector", typ: "string", cell: func(o runtime.Object) any {
			return labels.FormatLabels(ds(o).Spec.Template.Spec.NodeSelector)
		}},
		ageCol(),
		{name: "Containers", typ: "string", wide: true, cell: func(o runtime.Object) any {
			var names []string
			for _, c := range ds(o).Spec.Template.Spec.Containers {
				names = append(names, c.Name)
			}
			return strings.Join(names, ",")
		}},
		{name: "Images", typ: "string", wide: true, cell: func(o runtime.Object) any {
			var images []string
			for _, c := range ds(o).Spec.Template.Spec.Containers {
				images = append(images, c.Image)
			}
			return strings.Join(images, ",")
		}},
		{name: "Selector", typ: "string", wide: true, cell: func(o runtime.Object) any {
			return metav1.FormatLabelSelector(ds(o).Spec.Selector)
		}},
	}
}

// controllerRevisionColumns are kube-apiserver's: the controlling object as
// kind.group/name, and the revision number.
func controllerRevisionColumns() []column {
	return []column{nameCol(),
		{name: "Controller", typ: "string", cell: func(o runtime.Object) any {
			ref := metav1.GetControllerOf(o.(*appsv1.ControllerRevision))
			if ref == nil {
				return "<none>"
			}
			gv, _ := schema.ParseGroupVersion(ref.APIVersion)
			kind := strings.ToLower(ref.Kind)
			if gv.Group != "" {
				kind += "." + gv.Group
			}
			return kind + "/" + ref.Name
		}},
		{name: "Revision", typ: "integer", cell: func(o runtime.Object) any { return o.(*appsv1.ControllerRevision).Revision }},
		ageCol(),
	}
}
