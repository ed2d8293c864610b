package apiserver

import (
	"net/http"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	nodenetversion "github.com/nodenet/nodenet/internal/version"
)

// Version is what /version reports: the Kubernetes API level of the types
// this server serves, from internal/version.
var Version = nodenetversion.Info()

var (
	verbsAll       = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	verbsSubStatus = metav1.Verbs{"get", "patch", "update"}
)

func (s *Server) resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, r := range s.resources {
		if r.gv != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.plural, SingularName: r.singular, Namespaced: r.namespaced, Kind: r.kind,
			Verbs: r.discoveryVerbs(), ShortNames: r.shortNames, Categories: r.categories,
		})
		if r.hasStatus {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r.plural + "/status", Namespaced: r.namespaced, Kind: r.kind, Verbs: verbsSubStatus})
		}
		if r.kind == "Pod" && gv == coreV1 {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: "pods/binding", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}})
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"}})
		}
		if r.kind == "ServiceAccount" && gv == coreV1 {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: "serviceaccounts/token", Namespaced: true,
				Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest", Verbs: metav1.Verbs{"create"}})
		}
	}
	list.APIResources = append(list.APIResources, reviewResources(gv)...)
	return list
}

func (s *Server) groups() []metav1.APIGroup {
	seen := map[string]*metav1.APIGroup{}
	var names []string
	var gvs []schema.GroupVersion
	for _, r := range s.resources {
		gvs = append(gvs, r.gv)
	}
	for _, rv := range reviews {
		gvs = append(gvs, rv.gv)
	}
	for _, gv := range gvs {
		if gv.Group == "" {
			continue
		}
		g := seen[gv.Group]
		if g == nil {
			g = &metav1.APIGroup{Name: gv.Group}
			seen[gv.Group] = g
			names = append(names, gv.Group)
		}
		gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		if len(g.Versions) == 0 {
			g.Versions = append(g.Versions, gvd)
			g.PreferredVersion = gvd
		}
	}
	sort.Strings(names)
	out := make([]metav1.APIGroup, 0, len(names))
	for _, n := range names {
		out = append(out, *seen[n])
	}
	return out
}

// serveDiscovery answers /api, /apis, /api/v1, /apis/<g>, /apis/<g>/<v>.
// Legacy (unaggregated) documents are enough: clients that ask for
// aggregated discovery fall back when the Content-Type says legacy.
func (s *Server) serveDiscovery(w http.ResponseWriter, r *http.Request) bool {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "api":
		s.respond(w, r, http.StatusOK, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: s.advertise}}})
	case len(parts) == 2 && parts[0] == "api" && parts[1] == "v1":
		s.respond(w, r, http.StatusOK, s.resourceList(coreV1))
	case len(parts) == 1 && parts[0] == "apis":
		s.respond(w, r, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: s.groups()})
	case len(parts) == 2 && parts[0] == "apis":
		for _, g := range s.groups() {
			if g.Name == parts[1] {
				g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
				s.respond(w, r, http.StatusOK, &g)
				return true
			}
		}
		s.fail(w, r, errNoResource())
	case len(parts) == 3 && parts[0] == "apis":
		gv := schema.GroupVersion{Group: parts[1], Version: parts[2]}
		if s.byGV[gv] == nil && reviewResources(gv) == nil {
			s.fail(w, r, errNoResource())
			return true
		}
		s.respond(w, r, http.StatusOK, s.resourceList(gv))
	default:
		return false
	}
	return true
}
