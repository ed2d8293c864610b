package apiserver

import (
	"fmt"
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// authorizer decides what an authenticated user may do. Resource requests
// and the self-access reviews (kubectl auth can-i) both ask it, so a
// per-identity authorizer replacing allowAll changes both at once.
type authorizer interface {
	authorize(u user, a authzAttributes) authzDecision
	// rules lists what u may do in namespace (SelfSubjectRulesReview).
	rules(u user, namespace string) authorizationv1.SubjectRulesReviewStatus
}

// authzAttributes describe one action, as a SubjectAccessReview does.
type authzAttributes struct {
	verb string
	// A resource request names group/resource[/subresource] and maybe a
	// namespace and name; a non-resource request names a path.
	resourceRequest                bool
	group, resource, subresource   string
	namespace, name, nonResourceAt string
	// userAgent is the client's User-Agent ("" for access reviews).
	userAgent string
}

type authzDecision struct {
	allowed bool
	reason  string
}

// allowAll is the policy for the token file's users: the bundled server is
// a local, single-tenant control plane, so they may do everything (on real
// clusters nodenet's components talk to a real kube-apiserver and its
// RBAC). Service accounts are held to RBAC instead (rbac.go).
type allowAll struct{}

const allowAllReason = "nodenet API server: every authenticated user may do everything"

func (allowAll) authorize(user, authzAttributes) authzDecision {
	return authzDecision{allowed: true, reason: allowAllReason}
}

func (allowAll) rules(user, string) authorizationv1.SubjectRulesReviewStatus {
	return authorizationv1.SubjectRulesReviewStatus{
		ResourceRules:    []authorizationv1.ResourceRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
		NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
	}
}

// Attributes are what an Authorizer is asked about one resource request.
type Attributes struct {
	User      string
	Groups    []string
	UserAgent string // "" when an access review asks
	Verb      string
	Group     string
	Resource  string
	// Subresource is e.g. "status"; Namespace and Name may be empty.
	Subresource, Namespace, Name string
}

// Authorizer decides resource requests for an embedder (Config.Authorizer).
type Authorizer interface {
	Authorize(Attributes) (allowed bool, reason string)
}

// custom adapts an Authorizer. Non-resource requests (discovery, /version,
// health) stay allowed: an Authorizer is about resources.
type custom struct{ a Authorizer }

func (c custom) authorize(u user, a authzAttributes) authzDecision {
	if !a.resourceRequest {
		return authzDecision{allowed: true, reason: "non-resource requests are allowed"}
	}
	ok, why := c.a.Authorize(Attributes{User: u.Name, Groups: u.Groups, UserAgent: a.userAgent, Verb: a.verb, Group: a.group,
		Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name})
	return authzDecision{allowed: ok, reason: why}
}

// rules cannot be listed from an opaque Authorizer: the review says so.
func (custom) rules(user, string) authorizationv1.SubjectRulesReviewStatus {
	return authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "rules come from an embedder's authorizer and cannot be listed",
		ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}}
}

// unsecuredUser is who a request on --insecure-port is: it has no token,
// and kube-apiserver's old insecure port gave it this identity.
var unsecuredUser = user{Name: "system:unsecured", Groups: []string{"system:masters", "system:authenticated"}}

// requestUser is the authenticated caller of r.
func requestUser(r *http.Request) user {
	if u, ok := r.Context().Value(userKey{}).(user); ok {
		return u
	}
	return unsecuredUser
}

// authorizeResource asks the authorizer about a resource request and turns a
// refusal into kube-apiserver's 403.
func (s *Server) authorizeResource(r *http.Request, verb string, req *apiRequest) error {
	u := requestUser(r)
	d := s.authz.authorize(u, authzAttributes{
		verb: verb, resourceRequest: true, group: req.res.gv.Group, resource: req.res.plural, subresource: req.sub,
		namespace: req.namespace, name: req.name, userAgent: r.UserAgent(),
	})
	if d.allowed {
		return nil
	}
	where := ""
	if req.namespace != "" {
		where = fmt.Sprintf(" in the namespace %q", req.namespace)
	}
	resource := req.res.plural
	if req.sub != "" {
		resource += "/" + req.sub
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q%s", u.Name, verb, resource, req.res.gv.Group, where)
	if d.reason != "" {
		msg += ": " + d.reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: req.res.gv.Group, Resource: resource}, req.name, fmt.Errorf("%s", strings.TrimSpace(msg)))
}
