package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// apiRequest is a parsed resource URL.
type apiRequest struct {
	res       *resource
	namespace string
	name      string
	sub       string // "", "status", "binding", "token", a pod connect subresource
	watchPath bool   // legacy /watch/ prefix
}

// parsePath maps /api/v1/... and /apis/g/v/... onto a served resource.
func (s *Server) parsePath(path string) (*apiRequest, error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gv, parts = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return nil, errNoResource()
	}
	byName := s.byGV[gv]
	if byName == nil {
		return nil, errNoResource()
	}
	req := &apiRequest{}
	if parts[0] == "watch" {
		req.watchPath, parts = true, parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		if r := byName[parts[2]]; r != nil && r.namespaced {
			req.namespace, parts = parts[1], parts[2:]
		}
	}
	if len(parts) == 0 || len(parts) > 3 {
		return nil, errNoResource()
	}
	req.res = byName[parts[0]]
	if req.res == nil {
		// As kube-apiserver: an unknown resource (also one under
		// namespaces/<ns>/) is a path it does not serve, not a missing object.
		return nil, errNoResource()
	}
	if len(parts) > 1 {
		req.name = parts[1]
	}
	if len(parts) > 2 {
		req.sub = parts[2]
		ok := (req.sub == "status" && req.res.hasStatus) || (req.res.kind == "Pod" && req.res.gv == coreV1 && (req.sub == "binding" || podConnectSubs[req.sub])) ||
			(req.res.kind == "ServiceAccount" && req.res.gv == coreV1 && req.sub == "token")
		if !ok {
			return nil, errNoResource()
		}
	}
	return req, nil
}

func (r *apiRequest) gr() schema.GroupResource {
	return schema.GroupResource{Group: r.res.gv.Group, Resource: r.res.plural}
}

func (r *apiRequest) key() string { return r.res.store.Key(r.namespace, r.name) }

// maxBody bounds request bodies like kube-apiserver's 3 MiB object limit.
const maxBody = 3 << 20

func readBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("read request body: %v", err))
	}
	if len(data) > maxBody {
		return nil, apierrors.NewRequestEntityTooLargeError("limit is 3145728")
	}
	return data, nil
}

// toJSON converts a JSON or YAML body to JSON; protobuf is refused.
func toJSON(r *http.Request, data []byte) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	switch {
	case strings.Contains(ct, "yaml"):
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decode YAML body: %v", err))
		}
		return j, nil
	case strings.Contains(ct, "protobuf"):
		return protobufToJSON(data)
	case strings.Contains(ct, "cbor"):
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "", "this server accepts JSON, YAML and protobuf bodies", 0, false)
	}
	return data, nil
}

// decodeObject reads the request body as an object of res's kind. Unknown
// fields are refused with fieldValidation=Strict and reported as warnings
// otherwise, as kube-apiserver does.
func (s *Server) decodeObject(w http.ResponseWriter, r *http.Request, res *resource) (runtime.Object, error) {
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if data, err = toJSON(r, data); err != nil {
		return nil, err
	}
	obj := res.newObj()
	strictErrs, err := kjson.UnmarshalStrict(data, obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", res.kind, err))
	}
	if len(strictErrs) > 0 {
		mode := r.URL.Query().Get("fieldValidation")
		if mode == "Strict" {
			msgs := make([]string, len(strictErrs))
			for i, e := range strictErrs {
				msgs[i] = e.Error()
			}
			return nil, apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
		}
		if mode != "Ignore" {
			for _, e := range strictErrs {
				w.Header().Add("Warning", fmt.Sprintf("299 - %q", e.Error()))
			}
		}
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind != "" && gvk.Kind != res.kind {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the kind in the data (%s) does not match the expected kind (%s)", gvk.Kind, res.kind))
	}
	if gvk.Version != "" && gvk.GroupVersion() != res.gv {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", gvk.GroupVersion(), res.gv))
	}
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	return obj, nil
}

// selector is a parsed labelSelector + fieldSelector. It matches stored
// objects (what caches and etcd lists hold), so a view's fieldSet reads those.
type selector struct {
	labels labels.Selector
	fields fields.Selector
	res    *resource
}

func parseSelector(q map[string][]string, res *resource, name string) (*selector, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	ls, err := labels.Parse(get("labelSelector"))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid labelSelector: %v", err))
	}
	fs, err := fields.ParseSelector(get("fieldSelector"))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid fieldSelector: %v", err))
	}
	if name != "" {
		fs = fields.AndSelectors(fs, fields.OneTermEqualSelector("metadata.name", name))
	}
	for _, req := range fs.Requirements() {
		if !res.supportsField(req.Field) {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return &selector{labels: ls, fields: fs, res: res}, nil
}

func (r *resource) supportsField(f string) bool {
	if f == "metadata.name" || f == "metadata.namespace" {
		return true
	}
	if r.fieldSet == nil {
		return false
	}
	_, ok := r.fieldSet(r.stored().newObj())[f]
	return ok
}

func (sel *selector) empty() bool { return sel.labels.Empty() && sel.fields.Empty() }

func (sel *selector) matches(obj runtime.Object) bool {
	if sel.empty() {
		return true
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if !sel.labels.Matches(labels.Set(acc.GetLabels())) {
		return false
	}
	if sel.fields.Empty() {
		return true
	}
	set := fields.Set{"metadata.name": acc.GetName(), "metadata.namespace": acc.GetNamespace()}
	if sel.res.fieldSet != nil {
		for k, v := range sel.res.fieldSet(obj) {
			set[k] = v
		}
	}
	return sel.fields.Matches(set)
}

// filter returns nil when everything matches, saving a call per object.
func (sel *selector) filter() func(runtime.Object) bool {
	if sel.empty() {
		return nil
	}
	return sel.matches
}

func decodeDeleteOptions(r *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(data))) > 0 {
		if data, err = toJSON(r, data); err != nil {
			return nil, err
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, opts); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decode DeleteOptions: %v", err))
		}
	}
	q := r.URL.Query()
	if v := q.Get("gracePeriodSeconds"); v != "" {
		var g int64
		if _, err := fmt.Sscan(v, &g); err != nil {
			return nil, apierrors.NewBadRequest("gracePeriodSeconds must be an integer")
		}
		opts.GracePeriodSeconds = &g
	}
	if v := q.Get("propagationPolicy"); v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if q.Get("dryRun") == "All" {
		opts.DryRun = []string{"All"}
	}
	return opts, nil
}

// errNoResource is kube-apiserver's answer for a path it does not serve.
func errNoResource() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{},
	}}
}
