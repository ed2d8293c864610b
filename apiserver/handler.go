package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/apiserver/validation"
)

// serveResource dispatches a resource request to its verb.
func (s *Server) serveResource(w http.ResponseWriter, r *http.Request) {
	req, err := s.parsePath(r.URL.Path)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	setRequestInfo(r, req)
	if podConnectSubs[req.sub] {
		s.servePodConnect(w, r, req)
		return
	}
	q := r.URL.Query()
	isWatch := req.watchPath || q.Get("watch") == "true" || q.Get("watch") == "1"
	verb := requestVerb(r.Method, req, isWatch)
	if err := s.authorizeResource(r, verb, req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.res.refuse != nil {
		if err := req.res.refuse(verb, req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	switch {
	case req.sub == "token" && r.Method == http.MethodPost:
		s.createToken(w, r, req)
	case req.sub == "token":
		s.fail(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "serviceaccounts/token"}, r.Method))
	case r.Method == http.MethodGet && isWatch:
		s.watch(w, r, req)
	case r.Method == http.MethodGet && req.name == "":
		s.list(w, r, req)
	case r.Method == http.MethodGet:
		s.get(w, r, req)
	case r.Method == http.MethodPost && req.sub == "binding":
		s.bind(w, r, req)
	case r.Method == http.MethodPost && req.name == "":
		s.create(w, r, req)
	case r.Method == http.MethodPut && req.name != "":
		s.update(w, r, req)
	case r.Method == http.MethodPatch && req.name != "":
		s.patch(w, r, req)
	case r.Method == http.MethodDelete && req.name != "" && req.sub == "":
		s.delete(w, r, req)
	case r.Method == http.MethodDelete && req.name == "":
		s.deleteCollection(w, r, req)
	default:
		s.fail(w, r, apierrors.NewMethodNotSupported(req.gr(), r.Method))
	}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	obj, err := s.getObject(r.Context(), req, r.URL.Query().Get("resourceVersion"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.respond(w, r, http.StatusOK, obj)
}

// getObject reads one object; resourceVersion "0" is served from the cache.
func (s *Server) getObject(ctx context.Context, req *apiRequest, rv string) (runtime.Object, error) {
	if rv == "0" {
		if obj := req.res.cache.Get(req.key()); obj != nil {
			return req.res.out(obj), nil
		}
		return nil, apierrors.NewNotFound(req.gr(), req.name)
	}
	obj, err := req.res.store.Get(ctx, req.key())
	if err != nil {
		return nil, s.storageError(req, err)
	}
	return req.res.out(obj), nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	q := r.URL.Query()
	sel, err := parseSelector(q, req.res, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rv, match, cont := q.Get("resourceVersion"), q.Get("resourceVersionMatch"), q.Get("continue")
	var limit int64
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.ParseInt(v, 10, 64); err != nil || limit < 0 {
			s.fail(w, r, apierrors.NewBadRequest("limit must be a non-negative integer"))
			return
		}
	}
	var rev int64
	if rv != "" {
		if rev, err = strconv.ParseInt(rv, 10, 64); err != nil || rev < 0 {
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rv)))
			return
		}
	}
	if match != "" && rv == "" {
		s.fail(w, r, apierrors.NewBadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided"))
		return
	}
	if cont != "" && rv != "" && rv != "0" {
		s.fail(w, r, apierrors.NewBadRequest("specifying resourceVersion is not allowed when using continue"))
		return
	}
	prefix := req.res.store.NamespacePrefix(req.namespace)
	list := req.res.newList()
	lm := &metav1.ListMeta{}
	var items []runtime.Object
	// The cache answers "any version" and "not older than" reads; exact
	// reads, paged reads and consistent reads go to etcd.
	fromCache := cont == "" && ((rv == "0" && match != "Exact") || (rev > 0 && match == "NotOlderThan") || (rev > 0 && match == "" && limit == 0))
	if fromCache {
		var cacheRev int64
		minRev := rev
		if rv == "0" {
			minRev = req.res.store.LastWrite()
		}
		items, cacheRev, err = req.res.cache.List(r.Context(), prefix, minRev, sel.filter())
		if err != nil {
			s.fail(w, r, s.storageError(req, err))
			return
		}
		lm.ResourceVersion = strconv.FormatInt(cacheRev, 10)
	} else {
		exact := int64(0)
		if rev > 0 && (match == "Exact" || match == "") {
			exact = rev
		}
		res, err := req.res.store.List(r.Context(), prefix, storage.ListOptions{Rev: exact, Limit: limit, Continue: cont, Filter: sel.filter()})
		if err != nil {
			s.fail(w, r, s.storageError(req, err))
			return
		}
		items = res.Items
		lm.ResourceVersion = strconv.FormatInt(res.Rev, 10)
		lm.Continue = res.Continue
		lm.RemainingItemCount = res.Remaining
		if !sel.empty() {
			lm.RemainingItemCount = nil
		}
	}
	for i := range items {
		items[i] = req.res.out(items[i])
	}
	if err := meta.SetList(list, items); err != nil {
		s.fail(w, r, fmt.Errorf("build list: %w", err))
		return
	}
	la, _ := meta.ListAccessor(list)
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	list.GetObjectKind().SetGroupVersionKind(req.res.listGVK())
	s.respond(w, r, http.StatusOK, list)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	obj, err := s.decodeObject(w, r, req.res)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := admitNode(requestUser(r), req, obj); err != nil {
		s.fail(w, r, err)
		return
	}
	stored, err := s.createObject(r.Context(), req, obj, r.URL.Query().Get("dryRun") == "All")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.respond(w, r, http.StatusCreated, stored)
}

// createObject fills in server-owned metadata, defaults, allocates, validates
// and stores obj. It is also used for the server's own bootstrap objects.
func (s *Server) createObject(ctx context.Context, req *apiRequest, obj runtime.Object, dryRun bool) (runtime.Object, error) {
	res := req.res
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	var guard map[string]int64
	if res.namespaced {
		switch {
		case acc.GetNamespace() == "":
			acc.SetNamespace(req.namespace)
		case req.namespace != "" && acc.GetNamespace() != req.namespace:
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		if acc.GetNamespace() == "" {
			return nil, apierrors.NewBadRequest("a namespace must be specified to create a " + res.kind)
		}
		nsRev, err := s.namespaceOpen(ctx, acc.GetNamespace(), false)
		if err != nil {
			return nil, err
		}
		// The write only succeeds if the namespace is unchanged, so that no
		// object lands in it after its deletion started (and the namespace
		// finalizer's sweep missed it).
		guard = map[string]int64{s.nsRes.store.Key("", acc.GetNamespace()): nsRev}
	} else {
		acc.SetNamespace("")
	}
	generated := acc.GetName() == "" && acc.GetGenerateName() != ""
	for attempt := 0; ; attempt++ {
		if generated {
			acc.SetName(acc.GetGenerateName() + rand.String(5))
		}
		req := &apiRequest{res: res, namespace: acc.GetNamespace(), name: acc.GetName()}
		acc.SetUID(uuid.NewUUID())
		acc.SetCreationTimestamp(metav1.Now())
		acc.SetResourceVersion("")
		acc.SetGeneration(0)
		if res.tracksGeneration() {
			acc.SetGeneration(1)
		}
		acc.SetDeletionTimestamp(nil)
		acc.SetDeletionGracePeriodSeconds(nil)
		acc.SetManagedFields(nil)
		acc.SetSelfLink("")
		if res.prepareCreate != nil {
			res.prepareCreate(obj)
		}
		if res.defaults != nil {
			res.defaults(obj)
		}
		if errs := res.validate(obj); len(errs) > 0 {
			return nil, apierrors.NewInvalid(res.gvk().GroupKind(), acc.GetName(), errs)
		}
		stored, err := s.claimAndWrite(ctx, req, obj, nil, 0, dryRun, guard)
		if apierrors.IsAlreadyExists(err) && generated && attempt < 5 {
			continue
		}
		if errors.Is(err, storage.ErrGuardChanged) && attempt < 5 {
			// The namespace changed since the check: look again, in etcd.
			nsRev, nsErr := s.namespaceOpen(ctx, acc.GetNamespace(), true)
			if nsErr != nil {
				return nil, nsErr
			}
			guard[s.nsRes.store.Key("", acc.GetNamespace())] = nsRev
			continue
		}
		if errors.Is(err, storage.ErrGuardChanged) {
			return nil, s.storageError(req, err)
		}
		return stored, err
	}
}

// claimAndWrite allocates res.claims (if any) and writes obj — a create when
// old is nil, else an update at oldRev. A value taken meanwhile by another
// object is replaced and the write retried; a value the user asked for is
// refused. guard (may be nil) lists keys that must be unchanged: when one
// changed, the raw storage.ErrGuardChanged is returned for the caller.
func (s *Server) claimAndWrite(ctx context.Context, req *apiRequest, obj, old runtime.Object, oldRev int64, dryRun bool, guard map[string]int64) (runtime.Object, error) {
	res := req.res
	// assign writes its picks into the object: every attempt starts again
	// from what the client sent, so a value picked by an earlier attempt is
	// not mistaken for one the client asked for.
	var orig runtime.Object
	if res.claims != nil {
		orig = obj.DeepCopyObject()
	}
	for attempt := 0; ; attempt++ {
		var claims storage.Claims
		var requested map[string]bool
		if res.claims != nil {
			if attempt > 0 {
				obj = orig.DeepCopyObject()
			}
			var errs field.ErrorList
			claims, requested, errs = res.claims.assign(obj, old)
			if len(errs) > 0 {
				return nil, apierrors.NewInvalid(res.gvk().GroupKind(), req.name, errs)
			}
		}
		if dryRun {
			if res.claims != nil {
				res.claims.abandon(claims, requested, nil)
			}
			return obj, nil
		}
		var stored runtime.Object
		var err error
		claims.Unchanged = guard
		if old == nil {
			stored, err = res.store.Create(ctx, req.key(), res.in(obj), claims)
		} else {
			stored, err = res.store.Update(ctx, req.key(), oldRev, res.in(obj), claims)
		}
		if c, ok := storage.IsClaimed(err); ok && res.claims != nil {
			res.claims.taken(c.Keys)
			res.claims.abandon(claims, requested, c.Keys)
			for _, k := range c.Keys {
				if requested[k] {
					return nil, apierrors.NewInvalid(res.gvk().GroupKind(), req.name, res.claims.describeTaken(obj, k))
				}
			}
			if attempt < 16 {
				continue
			}
			return nil, apierrors.NewInternalError(fmt.Errorf("could not allocate after %d attempts", attempt))
		}
		if err != nil {
			if res.claims != nil {
				res.claims.abandon(claims, requested, nil)
			}
			if errors.Is(err, storage.ErrGuardChanged) {
				return nil, err
			}
			return nil, s.storageError(req, err)
		}
		if res.claims != nil {
			res.claims.committed(claims)
		}
		return res.out(stored), nil
	}
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	obj, err := s.decodeObject(w, r, req.res)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	acc, _ := meta.Accessor(obj)
	if acc.GetName() != req.name {
		s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", acc.GetName(), req.name)))
		return
	}
	if req.res.namespaced && acc.GetNamespace() != "" && acc.GetNamespace() != req.namespace {
		s.fail(w, r, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	wantRV := acc.GetResourceVersion()
	dryRun := r.URL.Query().Get("dryRun") == "All"
	stored, created, err := s.updateObject(r.Context(), req, wantRV, dryRun, func(runtime.Object) (runtime.Object, error) {
		return obj.DeepCopyObject(), nil
	})
	if apierrors.IsNotFound(err) && req.res.createOnUpdate && req.sub == "" {
		stored, err = s.createObject(r.Context(), req, obj, dryRun)
		created = true
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	s.respond(w, r, code, stored)
}

// updateObject reads the current object, asks mutate for the new one and
// writes it. wantRV "" means unconditional: conflicts with concurrent writers
// are retried on a fresh read.
func (s *Server) updateObject(ctx context.Context, req *apiRequest, wantRV string, dryRun bool, mutate func(cur runtime.Object) (runtime.Object, error)) (runtime.Object, bool, error) {
	res := req.res
	for attempt := 0; ; attempt++ {
		cur, err := res.store.Get(ctx, req.key())
		if err != nil {
			return nil, false, s.storageError(req, err)
		}
		if err := nodeMayWritePod(ctx, req, cur); err != nil {
			return nil, false, err
		}
		cur = res.out(cur)
		curAcc, _ := meta.Accessor(cur)
		curRev, _ := strconv.ParseInt(curAcc.GetResourceVersion(), 10, 64)
		if wantRV != "" && wantRV != curAcc.GetResourceVersion() {
			return nil, false, s.storageError(req, storage.ErrConflict)
		}
		next, err := mutate(cur.DeepCopyObject())
		if err != nil {
			return nil, false, err
		}
		obj, err := s.prepareUpdate(req, next, cur)
		if err != nil {
			return nil, false, err
		}
		if apiequality.Semantic.DeepEqual(obj, cur) {
			return cur, false, nil // a no-op update writes nothing, as in kube-apiserver
		}
		stored, err := s.claimAndWrite(ctx, req, obj, cur, curRev, dryRun, nil)
		if apierrors.IsConflict(err) && wantRV == "" && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if s.finalized(req, stored) {
			return s.deleteNow(ctx, req, stored)
		}
		return stored, false, nil
	}
}

// prepareUpdate applies the rules of an update (or status update) to next,
// given the stored cur: server-owned metadata is kept, the other half of a
// status split is kept, defaults are applied, generation bumps, validation.
func (s *Server) prepareUpdate(req *apiRequest, next, cur runtime.Object) (runtime.Object, error) {
	res := req.res
	switch {
	case req.sub == "status":
		// As kube-apiserver's status strategies: the client's metadata
		// (labels, annotations: flanneld publishes its node annotations
		// this way) and status are kept; the spec is reset to the stored one.
		keepSpec(next, cur)
		if res.prepareStatus != nil {
			res.prepareStatus(next, cur)
		}
	case res.hasStatus && req.sub == "":
		copyStatus(next, cur)
	}
	acc, _ := meta.Accessor(next)
	curAcc, _ := meta.Accessor(cur)
	acc.SetName(curAcc.GetName())
	acc.SetNamespace(curAcc.GetNamespace())
	acc.SetUID(curAcc.GetUID())
	acc.SetCreationTimestamp(curAcc.GetCreationTimestamp())
	acc.SetDeletionTimestamp(curAcc.GetDeletionTimestamp())
	acc.SetDeletionGracePeriodSeconds(curAcc.GetDeletionGracePeriodSeconds())
	acc.SetGeneration(curAcc.GetGeneration())
	acc.SetResourceVersion(curAcc.GetResourceVersion())
	acc.SetManagedFields(nil)
	acc.SetSelfLink("")
	next.GetObjectKind().SetGroupVersionKind(res.gvk())
	if res.claims != nil && req.sub == "" {
		res.claims.keepAllocated(next, cur)
	}
	if res.defaults != nil {
		res.defaults(next)
	}
	if res.prepareUpdate != nil && req.sub == "" {
		res.prepareUpdate(next, cur)
	}
	if res.tracksGeneration() && specChanged(next, cur) {
		acc.SetGeneration(curAcc.GetGeneration() + 1)
	}
	var errs field.ErrorList
	switch {
	case req.sub == "binding":
		// bind() made the only change and checked it.
	case req.sub == "status" && res.validateStat != nil:
		errs = res.validateStat(next, cur)
	case res.validateUpd != nil:
		errs = res.validateUpd(next, cur)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(res.gvk().GroupKind(), acc.GetName(), errs)
	}
	return next, nil
}

// finalized reports whether a terminating object has lost its last finalizer
// and has no grace period left to wait for.
func (s *Server) finalized(req *apiRequest, obj runtime.Object) bool {
	if req.res.kind == "Namespace" {
		return false // the namespace finalizer removes it once it is empty
	}
	acc, _ := meta.Accessor(obj)
	if acc.GetDeletionTimestamp() == nil || len(acc.GetFinalizers()) > 0 {
		return false
	}
	g := acc.GetDeletionGracePeriodSeconds()
	return g == nil || *g == 0
}

// deleteNow removes obj from storage (with its claims).
func (s *Server) deleteNow(ctx context.Context, req *apiRequest, obj runtime.Object) (runtime.Object, bool, error) {
	acc, _ := meta.Accessor(obj)
	rev, _ := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
	var claims storage.Claims
	if req.res.claims != nil {
		claims = req.res.claims.release(obj)
	}
	delRev, err := req.res.store.Delete(ctx, req.key(), rev, claims)
	if err != nil {
		return nil, false, s.storageError(req, err)
	}
	if req.res.claims != nil {
		req.res.claims.committed(claims)
	}
	out := obj.DeepCopyObject()
	oa, _ := meta.Accessor(out)
	oa.SetResourceVersion(strconv.FormatInt(delRev, 10))
	return out, false, nil
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	opts, err := decodeDeleteOptions(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.deleteObject(r.Context(), req, opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.respond(w, r, http.StatusOK, out)
}

// deleteObject deletes at once, or marks the object terminating when it has
// finalizers or a grace period (pods), or hands a namespace to finalization.
// It answers with the object in the request's resource's form.
func (s *Server) deleteObject(ctx context.Context, req *apiRequest, opts *metav1.DeleteOptions) (runtime.Object, error) {
	obj, err := s.deleteStored(ctx, req, opts)
	if err != nil {
		return nil, err
	}
	return req.res.out(obj), nil
}

// deleteStored is deleteObject on stored objects.
func (s *Server) deleteStored(ctx context.Context, req *apiRequest, opts *metav1.DeleteOptions) (runtime.Object, error) {
	res := req.res
	if res.kind == "Namespace" && res.gv == coreV1 && protectedNamespaces[req.name] {
		return nil, apierrors.NewForbidden(req.gr(), req.name, fmt.Errorf("this namespace may not be deleted"))
	}
	for attempt := 0; ; attempt++ {
		cur, err := res.store.Get(ctx, req.key())
		if err != nil {
			return nil, s.storageError(req, err)
		}
		if err := nodeMayWritePod(ctx, req, cur); err != nil {
			return nil, err
		}
		acc, _ := meta.Accessor(cur)
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != acc.GetUID() {
				return nil, apierrors.NewConflict(req.gr(), req.name, fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, acc.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != acc.GetResourceVersion() {
				return nil, apierrors.NewConflict(req.gr(), req.name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, acc.GetResourceVersion()))
			}
		}
		if len(opts.DryRun) > 0 {
			return cur, nil
		}
		var grace int64
		if res.gracePeriod != nil {
			grace = res.gracePeriod(cur, opts.GracePeriodSeconds)
		}
		terminating := len(acc.GetFinalizers()) > 0 || grace > 0 || res.kind == "Namespace"
		if !terminating {
			out, _, err := s.deleteNow(ctx, req, cur)
			if apierrors.IsConflict(err) && attempt < 10 {
				continue
			}
			return out, err
		}
		next := cur.DeepCopyObject()
		nacc, _ := meta.Accessor(next)
		deadline := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second))
		if old := nacc.GetDeletionTimestamp(); old == nil || deadline.Before(old) {
			nacc.SetDeletionTimestamp(&deadline)
			nacc.SetDeletionGracePeriodSeconds(&grace)
		}
		if ns, ok := next.(*corev1.Namespace); ok {
			ns.Status.Phase = corev1.NamespaceTerminating
		}
		if apiequality.Semantic.DeepEqual(next, cur) {
			return cur, nil
		}
		rev, _ := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
		stored, err := res.store.Update(ctx, req.key(), rev, next, storage.Claims{})
		if errors.Is(err, storage.ErrConflict) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, s.storageError(req, err)
		}
		if res.kind == "Namespace" {
			s.namespaces.enqueue(req.name)
			return stored, nil
		}
		if s.finalized(req, stored) {
			out, _, err := s.deleteNow(ctx, req, stored)
			return out, err
		}
		return stored, nil
	}
}

func (s *Server) deleteCollection(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	opts, err := decodeDeleteOptions(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sel, err := parseSelector(r.URL.Query(), req.res, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := req.res.store.List(r.Context(), req.res.store.NamespacePrefix(req.namespace), storage.ListOptions{Filter: sel.filter()})
	if err != nil {
		s.fail(w, r, s.storageError(req, err))
		return
	}
	for _, obj := range res.Items {
		acc, _ := meta.Accessor(obj)
		one := &apiRequest{res: req.res, namespace: acc.GetNamespace(), name: acc.GetName()}
		if _, err := s.deleteObject(r.Context(), one, opts); err != nil && !apierrors.IsNotFound(err) {
			s.fail(w, r, err)
			return
		}
	}
	s.respond(w, r, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
}

// bind implements pods/binding: the scheduler's one way to set spec.nodeName.
func (s *Server) bind(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	data, err := readBody(r)
	if err == nil {
		data, err = toJSON(r, data)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b := &corev1.Binding{}
	if err := json.Unmarshal(data, b); err != nil {
		s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("decode Binding: %v", err)))
		return
	}
	if b.Name == "" {
		b.Name = req.name
	}
	if b.Namespace == "" {
		b.Namespace = req.namespace
	}
	if errs := validateBinding(b, req.name); len(errs) > 0 {
		s.fail(w, r, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), b.Name, errs))
		return
	}
	podReq := &apiRequest{res: req.res, namespace: req.namespace, name: req.name, sub: "binding"}
	_, _, err = s.updateObject(r.Context(), podReq, "", false, func(cur runtime.Object) (runtime.Object, error) {
		pod := cur.(*corev1.Pod)
		if pod.DeletionTimestamp != nil {
			return nil, apierrors.NewConflict(req.gr(), req.name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", req.name))
		}
		if pod.Spec.NodeName != "" {
			return nil, apierrors.NewConflict(req.gr(), req.name, fmt.Errorf("pod %s is already assigned to node %q", req.name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		setPodCondition(pod, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
		return pod, nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.respond(w, r, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
}

func setPodCondition(pod *corev1.Pod, c corev1.PodCondition) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == c.Type {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}

// storageError maps storage errors onto Kubernetes API errors.
func (s *Server) storageError(req *apiRequest, err error) error {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		return err
	case errors.Is(err, storage.ErrNotFound):
		return apierrors.NewNotFound(req.gr(), req.name)
	case errors.Is(err, storage.ErrExists):
		return apierrors.NewAlreadyExists(req.gr(), req.name)
	case errors.Is(err, storage.ErrConflict):
		return apierrors.NewConflict(req.gr(), req.name, fmt.Errorf("%w; please apply your changes to the latest version and try again", storage.ErrConflict))
	case errors.Is(err, storage.ErrExpired):
		return apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
	case errors.Is(err, storage.ErrBadContinue):
		return apierrors.NewBadRequest(err.Error())
	case errors.Is(err, storage.ErrTooLarge):
		return tooLargeResourceVersion()
	case errors.Is(err, storage.ErrGuardChanged):
		return apierrors.NewConflict(req.gr(), req.name, fmt.Errorf("the namespace kept changing while the object was written; try again"))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError("request did not complete in time", 1)
	}
	return apierrors.NewInternalError(err)
}

func tooLargeResourceVersion() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout,
		Message: "Too large resource version",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}, RetryAfterSeconds: 1},
	}}
}

var protectedNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true}

// namespaceOpen refuses creates into a namespace that is missing or going
// away, and returns the namespace's revision to guard the write with. fresh
// reads etcd instead of the cache.
func (s *Server) namespaceOpen(ctx context.Context, name string, fresh bool) (int64, error) {
	key := s.nsRes.store.Key("", name)
	var obj runtime.Object
	if !fresh {
		obj = s.nsRes.cache.Get(key)
	}
	if obj == nil {
		// The cache may lag a namespace created a moment ago: ask etcd.
		o, err := s.nsRes.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			return 0, apierrors.NewNotFound(grNamespaces, name)
		}
		if err != nil {
			return 0, s.storageError(&apiRequest{res: s.nsRes, name: name}, err)
		}
		obj = o
	}
	ns := obj.(*corev1.Namespace)
	if ns.DeletionTimestamp != nil {
		err := apierrors.NewForbidden(grNamespaces, name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", name))
		// Controllers (the EndpointSlice one among them) branch on this cause.
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace",
			Message: fmt.Sprintf("namespace %s is being terminated", name),
		})
		return 0, err
	}
	rev, err := strconv.ParseInt(ns.ResourceVersion, 10, 64)
	if err != nil {
		return 0, apierrors.NewInternalError(fmt.Errorf("namespace %s has resourceVersion %q", name, ns.ResourceVersion))
	}
	return rev, nil
}

func validateBinding(b *corev1.Binding, podName string) field.ErrorList {
	errs := validation.Binding(b)
	if b.Name != podName {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), b.Name, "must match the pod name"))
	}
	return errs
}
