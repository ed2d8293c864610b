package apiserver

// Self reviews: authorization.k8s.io/v1 SelfSubjectAccessReview and
// SelfSubjectRulesReview (kubectl auth can-i [--list]) and
// authentication.k8s.io/v1 SelfSubjectReview (kubectl auth whoami). As
// upstream they are create-only and never stored: a POST is answered with
// the object and its status filled in. The other reviews upstream serves
// (SubjectAccessReview, LocalSubjectAccessReview, TokenReview) ask about
// other users or tokens, which only webhooks and aggregated servers need.

import (
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// review is one create-only, unstored resource.
type review struct {
	gv     schema.GroupVersion
	plural string
	kind   string
	newObj func() runtime.Object
	// answer validates the request object and fills in its status.
	answer func(s *Server, r *http.Request, obj runtime.Object) error
}

var reviews = []review{
	{
		gv: authorizationv1.SchemeGroupVersion, plural: "selfsubjectaccessreviews", kind: "SelfSubjectAccessReview",
		newObj: func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
		answer: answerAccessReview,
	},
	{
		gv: authorizationv1.SchemeGroupVersion, plural: "selfsubjectrulesreviews", kind: "SelfSubjectRulesReview",
		newObj: func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
		answer: answerRulesReview,
	},
	{
		gv: authenticationv1.SchemeGroupVersion, plural: "selfsubjectreviews", kind: "SelfSubjectReview",
		newObj: func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
		answer: answerSelfReview,
	},
}

// reviewFor returns the review served at path, if any.
func reviewFor(path string) *review {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) != 4 || parts[0] != "apis" {
		return nil
	}
	for i := range reviews {
		rv := &reviews[i]
		if rv.gv.Group == parts[1] && rv.gv.Version == parts[2] && rv.plural == parts[3] {
			return rv
		}
	}
	return nil
}

// serveReview answers a review request; false when path is not a review.
func (s *Server) serveReview(w http.ResponseWriter, r *http.Request) bool {
	rv := reviewFor(r.URL.Path)
	if rv == nil {
		return false
	}
	gr := schema.GroupResource{Group: rv.gv.Group, Resource: rv.plural}
	setRequestInfo(r, &apiRequest{res: &resource{gv: rv.gv, plural: rv.plural}})
	if r.Method != http.MethodPost {
		s.fail(w, r, apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method)))
		return true
	}
	// Decoding shares the resource path's rules (formats, strict fields,
	// kind and version checks).
	obj, err := s.decodeObject(w, r, &resource{gv: rv.gv, kind: rv.kind, newObj: rv.newObj})
	if err == nil {
		err = rv.answer(s, r, obj)
	}
	if err != nil {
		s.fail(w, r, err)
		return true
	}
	s.respond(w, r, http.StatusCreated, obj)
	return true
}

// emptyMeta: a review names nothing and is never stored, so upstream
// refuses any metadata.
func emptyMeta(m metav1.ObjectMeta) field.ErrorList {
	m.ManagedFields = nil
	if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, m) {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), m, "must be empty")}
	}
	return nil
}

func answerAccessReview(s *Server, r *http.Request, obj runtime.Object) error {
	sar := obj.(*authorizationv1.SelfSubjectAccessReview)
	spec := field.NewPath("spec")
	errs := emptyMeta(sar.ObjectMeta)
	ra, nra := sar.Spec.ResourceAttributes, sar.Spec.NonResourceAttributes
	if (ra == nil) == (nra == nil) {
		errs = append(errs, field.Invalid(spec, nra, "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if ra != nil {
		errs = append(errs, validateSelectorAttributes(ra, spec.Child("resourceAttributes"))...)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "", errs)
	}
	a := authzAttributes{}
	if ra != nil {
		a = authzAttributes{verb: ra.Verb, resourceRequest: true, group: ra.Group, resource: ra.Resource, subresource: ra.Subresource, namespace: ra.Namespace, name: ra.Name}
	} else {
		a = authzAttributes{verb: nra.Verb, nonResourceAt: nra.Path}
	}
	d := s.authz.authorize(requestUser(r), a)
	sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: d.allowed, Reason: d.reason}
	return nil
}

// validateSelectorAttributes: a selector is given either raw or as
// requirements, never both, never neither (upstream's
// validateResourceAttributes).
func validateSelectorAttributes(ra *authorizationv1.ResourceAttributes, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, raw string, n int) {
		switch {
		case raw != "" && n > 0:
			errs = append(errs, field.Invalid(p.Child("rawSelector"), raw, "may not specified at the same time as requirements"))
		case raw == "" && n == 0:
			errs = append(errs, field.Required(p.Child("requirements"), "when "+p.String()+" is specified, requirements or rawSelector is required"))
		}
	}
	if fs := ra.FieldSelector; fs != nil {
		check(path.Child("fieldSelector"), fs.RawSelector, len(fs.Requirements))
	}
	if ls := ra.LabelSelector; ls != nil {
		check(path.Child("labelSelector"), ls.RawSelector, len(ls.Requirements))
	}
	return errs
}

func answerRulesReview(s *Server, r *http.Request, obj runtime.Object) error {
	rr := obj.(*authorizationv1.SelfSubjectRulesReview)
	errs := emptyMeta(rr.ObjectMeta)
	if rr.Spec.Namespace == "" {
		// kubectl always sends one; upstream requires it.
		errs = append(errs, field.Required(field.NewPath("spec", "namespace"), "no namespace on request"))
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectRulesReview").GroupKind(), "", errs)
	}
	rr.Status = s.authz.rules(requestUser(r), rr.Spec.Namespace)
	return nil
}

func answerSelfReview(s *Server, r *http.Request, obj runtime.Object) error {
	ssr := obj.(*authenticationv1.SelfSubjectReview)
	if errs := emptyMeta(ssr.ObjectMeta); len(errs) > 0 {
		return apierrors.NewInvalid(authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview").GroupKind(), "", errs)
	}
	u := requestUser(r)
	ssr.CreationTimestamp = metav1.Now()
	ssr.Status.UserInfo = authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	for k, v := range u.Extra {
		if ssr.Status.UserInfo.Extra == nil {
			ssr.Status.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
		}
		ssr.Status.UserInfo.Extra[k] = v
	}
	return nil
}

// reviewResources lists the reviews of gv for discovery.
func reviewResources(gv schema.GroupVersion) []metav1.APIResource {
	var out []metav1.APIResource
	for _, rv := range reviews {
		if rv.gv == gv {
			out = append(out, metav1.APIResource{Name: rv.plural, Kind: rv.kind, Verbs: metav1.Verbs{"create"}})
		}
	}
	return out
}
