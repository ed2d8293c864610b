package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// patch applies a JSON patch, a JSON merge patch or a strategic merge patch to
// the current object and runs the result through the update path. Without a
// resourceVersion in the patch a concurrent writer only causes a retry on the
// fresh object, as kube-apiserver does.
func (s *Server) patch(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ct := r.Header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	pt := types.PatchType(strings.TrimSpace(ct))
	switch pt {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType:
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		s.fail(w, r, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", req.gr(), req.name,
			"server-side apply is not supported by this server; use client-side apply (kubectl apply without --server-side)", 0, false))
		return
	default:
		s.fail(w, r, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", req.gr(), req.name,
			fmt.Sprintf("unsupported patch type %q", pt), 0, false))
		return
	}
	body, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if pt == types.StrategicMergePatchType && strings.Contains(r.Header.Get("Content-Type"), "yaml") {
		if body, err = yaml.YAMLToJSON(body); err != nil {
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("decode YAML patch: %v", err)))
			return
		}
	}
	wantRV := patchResourceVersion(pt, body)
	dryRun := r.URL.Query().Get("dryRun") == "All"
	stored, _, err := s.updateObject(r.Context(), req, wantRV, dryRun, func(cur runtime.Object) (runtime.Object, error) {
		return applyPatch(req.res, pt, body, cur)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.respond(w, r, http.StatusOK, stored)
}

// patchResourceVersion returns metadata.resourceVersion if a merge patch
// sets it: then the patch is conditional, like an update with that version.
func patchResourceVersion(pt types.PatchType, body []byte) string {
	if pt == types.JSONPatchType {
		return ""
	}
	var m struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(body, &m)
	return m.Metadata.ResourceVersion
}

func applyPatch(res *resource, pt types.PatchType, body []byte, cur runtime.Object) (runtime.Object, error) {
	acc, _ := meta.Accessor(cur)
	rv := acc.GetResourceVersion()
	original, err := json.Marshal(cur)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("encode current object: %w", err))
	}
	var patched []byte
	switch pt {
	case types.JSONPatchType:
		p, perr := jsonpatch.DecodePatch(body)
		if perr != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decode JSON patch: %v", perr))
		}
		patched, err = p.Apply(original)
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(original, body)
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(original, body, res.newObj())
	}
	if err != nil {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: fmt.Sprintf("the patch cannot be applied to %s %q: %v", res.singular, acc.GetName(), err),
		}}
	}
	next := res.newObj()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(patched, next); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode patched %s: %v", res.kind, err))
	}
	nacc, _ := meta.Accessor(next)
	if nacc.GetResourceVersion() == "" {
		nacc.SetResourceVersion(rv)
	}
	return next, nil
}
