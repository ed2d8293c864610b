package apiserver

import (
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodenet/nodenet/apiserver/validation"
)

// endpointsResource is core/v1 Endpoints. Nothing in nodenet reads them;
// they are served (and kept filled by the controller manager's endpoints
// controller, from the EndpointSlices) for the many tools that still do.
func endpointsResource() *resource {
	return &resource{
		gv: coreV1, plural: "endpoints", singular: "endpoints", kind: "Endpoints", shortNames: []string{"ep"},
		namespaced: true,
		newObj:     func() runtime.Object { return &corev1.Endpoints{} },
		newList:    func() runtime.Object { return &corev1.EndpointsList{} },
		defaults:   func(o runtime.Object) { defaultEndpoints(o.(*corev1.Endpoints)) },
		validate:   typed(validation.Endpoints), validateUpd: typed2(validation.EndpointsUpdate),
		columns: func() []column {
			return []column{nameCol(),
				{name: "Endpoints", typ: "string", cell: func(o runtime.Object) any { return endpointsCell(o.(*corev1.Endpoints)) }},
				ageCol(),
			}
		},
	}
}

// defaultEndpoints: an unset port protocol is TCP, as upstream defaults it.
func defaultEndpoints(e *corev1.Endpoints) {
	for i := range e.Subsets {
		for j := range e.Subsets[i].Ports {
			if e.Subsets[i].Ports[j].Protocol == "" {
				e.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

// endpointsCell is kubectl's ENDPOINTS column: the first three ready
// ip:port pairs, then how many more.
func endpointsCell(e *corev1.Endpoints) string {
	const shown = 3
	var list []string
	total := 0
	for _, ss := range e.Subsets {
		ports := ss.Ports
		if len(ports) == 0 {
			ports = []corev1.EndpointPort{{}} // headless without ports: bare IPs
		}
		for _, p := range ports {
			for _, a := range ss.Addresses {
				total++
				if len(list) == shown {
					continue
				}
				if p.Port == 0 {
					list = append(list, a.IP)
				} else {
					list = append(list, net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
				}
			}
		}
	}
	if len(list) == 0 {
		return "<none>"
	}
	if total > shown {
		return strings.Join(list, ",") + " + " + strconv.Itoa(total-shown) + " more..."
	}
	return strings.Join(list, ",")
}
