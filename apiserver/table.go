package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// wantsTable reports whether the client (kubectl get) asked for server-side
// printing.
func wantsTable(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "as=Table")
}

type column struct {
	name     string
	wide     bool // priority 1: shown with -o wide
	typ      string
	cell     func(runtime.Object) any
	describe string
}

func age(o runtime.Object) any {
	acc, _ := meta.Accessor(o)
	ts := acc.GetCreationTimestamp()
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}

func nameCol() column {
	return column{name: "Name", typ: "string", describe: "Name must be unique within a namespace.", cell: func(o runtime.Object) any {
		acc, _ := meta.Accessor(o)
		return acc.GetName()
	}}
}

func ageCol() column {
	return column{name: "Age", typ: "string", cell: age, describe: "Time since creation."}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// columnsFor mirrors kubectl's familiar columns for each resource.
func columnsFor(res *resource) []column {
	if res.columns != nil {
		return res.columns()
	}
	switch res.kind + "/" + res.gv.Group {
	case "Node/":
		return []column{nameCol(),
			{name: "Status", typ: "string", cell: func(o runtime.Object) any { return nodeStatus(o.(*corev1.Node)) }},
			{name: "Roles", typ: "string", cell: func(o runtime.Object) any { return nodeRoles(o.(*corev1.Node)) }},
			ageCol(),
			{name: "Version", typ: "string", cell: func(o runtime.Object) any { return o.(*corev1.Node).Status.NodeInfo.KubeletVersion }},
			{name: "Internal-IP", typ: "string", wide: true, cell: func(o runtime.Object) any { return nodeAddr(o.(*corev1.Node), corev1.NodeInternalIP) }},
			{name: "External-IP", typ: "string", wide: true, cell: func(o runtime.Object) any { return nodeAddr(o.(*corev1.Node), corev1.NodeExternalIP) }},
			{name: "Pod-CIDRs", typ: "string", wide: true, cell: func(o runtime.Object) any { return orNone(strings.Join(o.(*corev1.Node).Spec.PodCIDRs, ",")) }},
			{name: "Kernel-Version", typ: "string", wide: true, cell: func(o runtime.Object) any { return orNone(o.(*corev1.Node).Status.NodeInfo.KernelVersion) }},
		}
	case "Pod/":
		return []column{nameCol(),
			{name: "Ready", typ: "string", cell: func(o runtime.Object) any { return podReady(o.(*corev1.Pod)) }},
			{name: "Status", typ: "string", cell: func(o runtime.Object) any { return podStatus(o.(*corev1.Pod)) }},
			{name: "Restarts", typ: "string", cell: func(o runtime.Object) any { return fmt.Sprint(podRestarts(o.(*corev1.Pod))) }},
			ageCol(),
			{name: "IP", typ: "string", wide: true, cell: func(o runtime.Object) any { return orNone(o.(*corev1.Pod).Status.PodIP) }},
			{name: "Node", typ: "string", wide: true, cell: func(o runtime.Object) any { return orNone(o.(*corev1.Pod).Spec.NodeName) }},
		}
	case "Service/":
		return []column{nameCol(),
			{name: "Type", typ: "string", cell: func(o runtime.Object) any { return string(o.(*corev1.Service).Spec.Type) }},
			{name: "Cluster-IP", typ: "string", cell: func(o runtime.Object) any { return orNone(o.(*corev1.Service).Spec.ClusterIP) }},
			{name: "External-IP", typ: "string", cell: func(o runtime.Object) any { return serviceExternal(o.(*corev1.Service)) }},
			{name: "Port(s)", typ: "string", cell: func(o runtime.Object) any { return servicePorts(o.(*corev1.Service)) }},
			ageCol(),
			{name: "Selector", typ: "string", wide: true, cell: func(o runtime.Object) any { return orNone(selectorString(o.(*corev1.Service).Spec.Selector)) }},
		}
	case "EndpointSlice/discovery.k8s.io":
		return []column{nameCol(),
			{name: "AddressType", typ: "string", cell: func(o runtime.Object) any { return string(o.(*discoveryv1.EndpointSlice).AddressType) }},
			{name: "Ports", typ: "string", cell: func(o runtime.Object) any { return slicePorts(o.(*discoveryv1.EndpointSlice)) }},
			{name: "Endpoints", typ: "string", cell: func(o runtime.Object) any { return sliceEndpoints(o.(*discoveryv1.EndpointSlice)) }},
			ageCol(),
		}
	case "Namespace/":
		return []column{nameCol(),
			{name: "Status", typ: "string", cell: func(o runtime.Object) any { return string(o.(*corev1.Namespace).Status.Phase) }},
			ageCol(),
		}
	case "ConfigMap/":
		return []column{nameCol(),
			{name: "Data", typ: "integer", cell: func(o runtime.Object) any {
				c := o.(*corev1.ConfigMap)
				return int64(len(c.Data) + len(c.BinaryData))
			}},
			ageCol(),
		}
	case "Lease/coordination.k8s.io":
		return []column{nameCol(),
			{name: "Holder", typ: "string", cell: func(o runtime.Object) any {
				if h := o.(*coordinationv1.Lease).Spec.HolderIdentity; h != nil {
					return *h
				}
				return ""
			}},
			ageCol(),
		}
	case "Event/":
		return []column{
			{name: "Last Seen", typ: "string", cell: func(o runtime.Object) any {
				e := o.(*corev1.Event)
				if !e.LastTimestamp.IsZero() {
					return duration.HumanDuration(time.Since(e.LastTimestamp.Time))
				}
				return age(o)
			}},
			{name: "Type", typ: "string", cell: func(o runtime.Object) any { return o.(*corev1.Event).Type }},
			{name: "Reason", typ: "string", cell: func(o runtime.Object) any { return o.(*corev1.Event).Reason }},
			{name: "Object", typ: "string", cell: func(o runtime.Object) any {
				e := o.(*corev1.Event)
				return strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name
			}},
			{name: "Message", typ: "string", cell: func(o runtime.Object) any { return strings.TrimSpace(o.(*corev1.Event).Message) }},
		}
	}
	return []column{nameCol(), ageCol()}
}

// toTable renders obj (a list or one object) as a metav1.Table.
func (s *Server) toTable(res *resource, obj runtime.Object, r *http.Request) *metav1.Table {
	if _, ok := obj.(*metav1.Status); ok {
		return nil
	}
	// A view's rows are those of the stored resource (kube-apiserver prints
	// events.k8s.io Events as core Events), with the view's objects.
	cols := columnsFor(res.stored())
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}}
	for _, c := range cols {
		p := int32(0)
		if c.wide {
			p = 1
		}
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c.name, Type: c.typ, Priority: p, Description: c.describe})
	}
	var items []runtime.Object
	if meta.IsListType(obj) {
		items, _ = meta.ExtractList(obj)
		if la, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion, t.Continue, t.RemainingItemCount = la.GetResourceVersion(), la.GetContinue(), la.GetRemainingItemCount()
		}
	} else {
		items = []runtime.Object{obj}
		if acc, err := meta.Accessor(obj); err == nil {
			t.ResourceVersion = acc.GetResourceVersion()
		}
	}
	withObject := r.URL.Query().Get("includeObject") != "None"
	for _, it := range items {
		row := metav1.TableRow{}
		stored := res.in(it)
		for _, c := range cols {
			row.Cells = append(row.Cells, c.cell(stored))
		}
		if withObject {
			row.Object = rowObject(res, it, r.URL.Query().Get("includeObject") == "Object")
		}
		t.Rows = append(t.Rows, row)
	}
	if t.Rows == nil {
		t.Rows = []metav1.TableRow{}
	}
	return t
}

// rowObject is the row's object: the whole object, or (the default) its
// metadata as a PartialObjectMetadata.
func rowObject(res *resource, it runtime.Object, full bool) runtime.RawExtension {
	if full {
		it.GetObjectKind().SetGroupVersionKind(res.gvk())
		raw, _ := json.Marshal(it)
		return runtime.RawExtension{Raw: raw}
	}
	acc, _ := meta.Accessor(it)
	pom := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}}
	pom.Name, pom.Namespace, pom.UID = acc.GetName(), acc.GetNamespace(), acc.GetUID()
	pom.ResourceVersion, pom.CreationTimestamp = acc.GetResourceVersion(), acc.GetCreationTimestamp()
	pom.Labels, pom.Annotations = acc.GetLabels(), acc.GetAnnotations()
	pom.DeletionTimestamp, pom.Generation = acc.GetDeletionTimestamp(), acc.GetGeneration()
	raw, _ := json.Marshal(pom)
	return runtime.RawExtension{Raw: raw}
}

func nodeStatus(n *corev1.Node) string {
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status = "NotReady"
			if c.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	return status
}

func nodeRoles(n *corev1.Node) string {
	var roles []string
	for k := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	return orNone(strings.Join(roles, ","))
}

func nodeAddr(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func podReady(p *corev1.Pod) string {
	ready := 0
	for _, c := range p.Status.ContainerStatuses {
		if c.Ready {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers))
}

func podStatus(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	if p.Status.Reason != "" {
		return p.Status.Reason
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
		if t := c.State.Terminated; t != nil && t.Reason != "" && p.Status.Phase != corev1.PodSucceeded {
			return t.Reason
		}
	}
	return string(p.Status.Phase)
}

func podRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func serviceExternal(s *corev1.Service) string {
	var ips []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			ips = append(ips, in.IP)
		} else if in.Hostname != "" {
			ips = append(ips, in.Hostname)
		}
	}
	ips = append(ips, s.Spec.ExternalIPs...)
	switch {
	case len(ips) > 0:
		return strings.Join(ips, ",")
	case s.Spec.Type == corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	case s.Spec.Type == corev1.ServiceTypeLoadBalancer:
		return "<pending>"
	}
	return "<none>"
}

func servicePorts(s *corev1.Service) string {
	var parts []string
	for _, p := range s.Spec.Ports {
		v := fmt.Sprintf("%d", p.Port)
		if p.NodePort != 0 {
			v += fmt.Sprintf(":%d", p.NodePort)
		}
		parts = append(parts, v+"/"+string(p.Protocol))
	}
	return orNone(strings.Join(parts, ","))
}

func selectorString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func slicePorts(s *discoveryv1.EndpointSlice) string {
	var parts []string
	for _, p := range s.Ports {
		if p.Port != nil {
			parts = append(parts, fmt.Sprint(*p.Port))
		}
	}
	return orNone(strings.Join(parts, ","))
}

func sliceEndpoints(s *discoveryv1.EndpointSlice) string {
	var addrs []string
	for _, e := range s.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	if len(addrs) > 3 {
		return strings.Join(addrs[:3], ",") + fmt.Sprintf(" + %d more...", len(addrs)-3)
	}
	return orNone(strings.Join(addrs, ","))
}
