package apiserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OpenAPI documents are derived from the Go types by reflection: kubectl
// needs them for `apply` (strategic-merge patch metadata, and whether the
// server takes fieldValidation), and k8s.io/kubernetes' generated
// definitions are not importable. The schemas carry types, the
// x-kubernetes-group-version-kind of every kind and the patch strategy tags;
// they leave out descriptions.

type openAPIDocs struct {
	once    sync.Once
	v2JSON  []byte
	v2Proto []byte
	v3      map[string][]byte // "api/v1", "apis/discovery.k8s.io/v1" → JSON
	v3Root  []byte
	err     error
}

type schemaGen struct {
	refPrefix string
	defs      map[string]map[string]any
}

var (
	timeType     = reflect.TypeOf(metav1.Time{})
	microType    = reflect.TypeOf(metav1.MicroTime{})
	durationType = reflect.TypeOf(metav1.Duration{})
)

// defName names a definition the way kube-openapi does:
// k8s.io/api/core/v1.Service → io.k8s.api.core.v1.Service.
func defName(t reflect.Type) string {
	pkg := t.PkgPath()
	parts := strings.SplitN(pkg, "/", 2)
	host := strings.Split(parts[0], ".")
	for i, j := 0, len(host)-1; i < j; i, j = i+1, j-1 {
		host[i], host[j] = host[j], host[i]
	}
	name := strings.Join(host, ".")
	if len(parts) > 1 {
		name += "." + strings.ReplaceAll(parts[1], "/", ".")
	}
	return name + "." + t.Name()
}

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType, microType:
		return map[string]any{"type": "string", "format": "date-time"}
	case durationType:
		return map[string]any{"type": "string"}
	}
	switch t.PkgPath() + "." + t.Name() {
	case "k8s.io/apimachinery/pkg/util/intstr.IntOrString", "k8s.io/apimachinery/pkg/api/resource.Quantity":
		return map[string]any{"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": true}
	case "k8s.io/apimachinery/pkg/runtime.RawExtension":
		return map[string]any{"type": "object"}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int32, reflect.Int16, reflect.Int8, reflect.Uint16, reflect.Uint8:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int64, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number", "format": "double"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		name := defName(t)
		if _, ok := g.defs[name]; !ok {
			def := map[string]any{"type": "object"}
			g.defs[name] = def // placeholder first: types may refer to themselves
			props := map[string]any{}
			g.properties(t, props)
			def["properties"] = props
		}
		return map[string]any{"$ref": g.refPrefix + name}
	}
	return map[string]any{"type": "object"}
}

func (g *schemaGen) properties(t reflect.Type, props map[string]any) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.properties(ft, props)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		s := g.schema(f.Type)
		if strategy := f.Tag.Get("patchStrategy"); strategy != "" {
			s = withExtensions(s, map[string]any{"x-kubernetes-patch-strategy": strategy})
			if key := f.Tag.Get("patchMergeKey"); key != "" {
				s["x-kubernetes-patch-merge-key"] = key
			}
		}
		props[name] = s
	}
}

// withExtensions adds extensions to a schema; a $ref cannot have siblings in
// OpenAPI v2, so it is wrapped in allOf.
func withExtensions(s map[string]any, ext map[string]any) map[string]any {
	out := map[string]any{}
	if _, isRef := s["$ref"]; isRef {
		out["allOf"] = []any{s}
	} else {
		for k, v := range s {
			out[k] = v
		}
	}
	for k, v := range ext {
		out[k] = v
	}
	return out
}

func gvkExt(gvk schema.GroupVersionKind) []map[string]string {
	return []map[string]string{{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}}
}

// buildSpec produces the paths and definitions of the resources for one
// OpenAPI flavour (v3 when v3 is true).
func (s *Server) buildSpec(v3 bool, only *schema.GroupVersion) (map[string]any, map[string]map[string]any) {
	g := &schemaGen{refPrefix: "#/definitions/", defs: map[string]map[string]any{}}
	if v3 {
		g.refPrefix = "#/components/schemas/"
	}
	paths := map[string]any{}
	param := func(name, in string, required bool) map[string]any {
		p := map[string]any{"name": name, "in": in, "uniqueItems": true}
		if required {
			p["required"] = true
		}
		if v3 {
			p["schema"] = map[string]any{"type": "string", "uniqueItems": true}
		} else {
			p["type"] = "string"
		}
		return p
	}
	body := func(ref map[string]any) (string, any) {
		if v3 {
			return "requestBody", map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": ref}}}
		}
		return "parameters", map[string]any{"name": "body", "in": "body", "required": true, "schema": ref}
	}
	response := func(ref map[string]any) map[string]any {
		if v3 {
			return map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": ref}}}}
		}
		return map[string]any{"200": map[string]any{"description": "OK", "schema": ref}}
	}
	writeParams := []any{param("dryRun", "query", false), param("fieldManager", "query", false), param("fieldValidation", "query", false)}
	op := func(action string, gvk schema.GroupVersionKind, ref map[string]any, withBody bool, id string) map[string]any {
		o := map[string]any{
			"operationId":                     id,
			"x-kubernetes-action":             action,
			"x-kubernetes-group-version-kind": gvkExt(gvk)[0],
			"responses":                       response(ref),
			"consumes":                        []string{"application/json", "application/yaml"},
			"produces":                        []string{"application/json", "application/yaml"},
		}
		if v3 {
			delete(o, "consumes")
			delete(o, "produces")
		}
		var params []any
		if withBody {
			params = append(params, writeParams...)
			k, v := body(ref)
			if action == "patch" {
				k, v = body(map[string]any{"$ref": g.refPrefix + "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"})
			}
			if k == "parameters" {
				params = append(params, v)
			} else {
				o[k] = v
			}
		}
		if len(params) > 0 {
			o["parameters"] = params
		}
		return o
	}
	g.defs["io.k8s.apimachinery.pkg.apis.meta.v1.Patch"] = map[string]any{"type": "object"}
	for _, r := range s.resources {
		if only != nil && r.gv != *only {
			continue
		}
		gvk := r.gvk()
		ref := g.schema(reflect.TypeOf(r.newObj()).Elem())
		listRef := g.schema(reflect.TypeOf(r.newList()).Elem())
		g.defs[defName(reflect.TypeOf(r.newObj()).Elem())]["x-kubernetes-group-version-kind"] = gvkExt(gvk)
		g.defs[defName(reflect.TypeOf(r.newList()).Elem())]["x-kubernetes-group-version-kind"] = gvkExt(r.listGVK())
		base := r.groupPath()
		pathParams := []any{param("name", "path", true), param("pretty", "query", false)}
		collParams := []any{param("pretty", "query", false)}
		if r.namespaced {
			base += "/namespaces/{namespace}"
			pathParams = append(pathParams, param("namespace", "path", true))
			collParams = append(collParams, param("namespace", "path", true))
		}
		id := strings.ToLower(r.kind)
		coll := base + "/" + r.plural
		paths[coll] = map[string]any{
			"parameters": collParams,
			"get":        op("list", gvk, listRef, false, "list"+id),
			"post":       op("post", gvk, ref, true, "create"+id),
			"delete":     op("deletecollection", gvk, ref, false, "deletecollection"+id),
		}
		item := map[string]any{
			"parameters": append(append([]any{}, pathParams...), writeParams...),
			"get":        op("get", gvk, ref, false, "read"+id),
			"put":        op("put", gvk, ref, true, "replace"+id),
			"patch":      op("patch", gvk, ref, true, "patch"+id),
			"delete":     op("delete", gvk, ref, false, "delete"+id),
		}
		paths[coll+"/{name}"] = item
		if r.hasStatus {
			paths[coll+"/{name}/status"] = map[string]any{
				"parameters": append(append([]any{}, pathParams...), writeParams...),
				"get":        op("get", gvk, ref, false, "read"+id+"status"),
				"put":        op("put", gvk, ref, true, "replace"+id+"status"),
				"patch":      op("patch", gvk, ref, true, "patch"+id+"status"),
			}
		}
	}
	return paths, g.defs
}

func (d *openAPIDocs) build(s *Server) {
	info := map[string]any{"title": "Kubernetes", "version": Version.GitVersion}
	paths, defs := s.buildSpec(false, nil)
	v2 := map[string]any{"swagger": "2.0", "info": info, "paths": paths, "definitions": defs}
	if d.v2JSON, d.err = json.Marshal(v2); d.err != nil {
		return
	}
	doc, err := openapiv2.ParseDocument(d.v2JSON)
	if err != nil {
		d.err = fmt.Errorf("build openapi v2 document: %w", err)
		return
	}
	if d.v2Proto, d.err = proto.Marshal(doc); d.err != nil {
		return
	}
	d.v3 = map[string][]byte{}
	root := map[string]any{}
	for gv := range s.byGV {
		gv := gv
		p, defs := s.buildSpec(true, &gv)
		data, err := json.Marshal(map[string]any{"openapi": "3.0.0", "info": info, "paths": p, "components": map[string]any{"schemas": defs}})
		if err != nil {
			d.err = err
			return
		}
		key := strings.TrimPrefix(groupVersionPath(gv), "/")
		d.v3[key] = data
		sum := sha256.Sum256(data)
		root[key] = map[string]any{"serverRelativeURL": "/openapi/v3/" + key + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))}
	}
	d.v3Root, d.err = json.Marshal(map[string]any{"paths": root})
}

func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// serveOpenAPI answers /openapi/v2 (protobuf or JSON) and /openapi/v3[/...].
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	if path != "/openapi/v2" && path != "/openapi/v3" && !strings.HasPrefix(path, "/openapi/v3/") {
		return false
	}
	d := &s.openapi
	d.once.Do(func() { d.build(s) })
	if d.err != nil {
		http.Error(w, d.err.Error(), http.StatusInternalServerError)
		return true
	}
	var data []byte
	ct := "application/json"
	switch {
	case path == "/openapi/v2" && strings.Contains(r.Header.Get("Accept"), "protobuf"):
		data, ct = d.v2Proto, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
	case path == "/openapi/v2":
		data = d.v2JSON
	case path == "/openapi/v3":
		data = d.v3Root
	default:
		data = d.v3[strings.TrimPrefix(path, "/openapi/v3/")]
		if data == nil {
			http.NotFound(w, r)
			return true
		}
	}
	w.Header().Set("Content-Type", ct)
	if r.URL.Query().Get("hash") != "" {
		// Documents addressed by hash never change; clients may cache them.
		w.Header().Set("Cache-Control", "public, immutable")
	}
	_, _ = w.Write(data)
	return true
}
