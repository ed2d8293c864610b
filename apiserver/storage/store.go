package storage

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Claims are extra keys written or removed in the same transaction as an
// object: Put keys must not exist yet (the transaction fails with a
// *ClaimedError otherwise); Release keys are deleted. Unchanged keys must
// still have the given mod revision (0: must not exist), or the transaction
// fails with ErrGuardChanged — a create into a namespace is guarded by the
// namespace, so none slips in once its deletion has begun.
type Claims struct {
	Put       map[string]string
	Release   []string
	Unchanged map[string]int64
}

// Store reads and writes the objects of one resource under one key prefix.
type Store struct {
	client *clientv3.Client
	prefix string // ends with "/"
	gvk    schema.GroupVersionKind
	newObj func() runtime.Object
	// Observe, when set, is told how long each etcd call took.
	Observe func(op string, seconds float64)
	// lastWrite is the highest revision a write through this store
	// committed: what a cache read must not be older than (LastWrite).
	lastWrite atomic.Int64
}

// LastWrite is the revision of this store's latest committed write. A
// cache read at "any" version (resourceVersion=0) waits for it, so a
// client never lists from the cache without a write the server already
// answered (the watch cache lags etcd by its event delivery).
func (s *Store) LastWrite() int64 { return s.lastWrite.Load() }

// NewStore returns a store for objects of kind gvk kept under prefix.
func NewStore(client *clientv3.Client, prefix string, gvk schema.GroupVersionKind, newObj func() runtime.Object) *Store {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{client: client, prefix: prefix, gvk: gvk, newObj: newObj}
}

// Prefix is the etcd key prefix of every object in this store.
func (s *Store) Prefix() string { return s.prefix }

// Key returns the etcd key of an object; namespace is "" for cluster-scoped
// resources.
func (s *Store) Key(namespace, name string) string {
	if namespace == "" {
		return s.prefix + name
	}
	return s.prefix + namespace + "/" + name
}

// NamespacePrefix is the key prefix for all objects of one namespace ("" for all).
func (s *Store) NamespacePrefix(namespace string) string {
	if namespace == "" {
		return s.prefix
	}
	return s.prefix + namespace + "/"
}

// Encode serialises obj for etcd. resourceVersion is not stored: it is the
// key's mod revision and is filled in on every read.
func (s *Store) Encode(obj runtime.Object) ([]byte, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("access object metadata: %w", err)
	}
	rv := acc.GetResourceVersion()
	acc.SetResourceVersion("")
	obj.GetObjectKind().SetGroupVersionKind(s.gvk)
	data, err := json.Marshal(obj)
	acc.SetResourceVersion(rv)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", s.gvk.Kind, err)
	}
	return data, nil
}

// Decode turns stored bytes into an object carrying resourceVersion rev.
func (s *Store) Decode(data []byte, rev int64) (runtime.Object, error) {
	obj := s.newObj()
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", s.gvk.Kind, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(s.gvk)
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("access object metadata: %w", err)
	}
	acc.SetResourceVersion(strconv.FormatInt(rev, 10))
	return obj, nil
}

func (s *Store) observe(op string, elapsed func() float64) {
	if s.Observe != nil {
		s.Observe(op, elapsed())
	}
}

// Get reads the current object at key.
func (s *Store) Get(ctx context.Context, key string) (runtime.Object, error) {
	defer s.observe("get", timer())
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrNotFound
	}
	return s.Decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// Create writes obj at key if the key does not exist and every claim is free.
// It returns the stored object (with its resourceVersion).
func (s *Store) Create(ctx context.Context, key string, obj runtime.Object, claims Claims) (runtime.Object, error) {
	defer s.observe("create", timer())
	data, err := s.Encode(obj)
	if err != nil {
		return nil, err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(data))}
	resp, err := s.txn(ctx, cmps, ops, claims, key, 0)
	if err != nil {
		if errors.Is(err, errKeyMismatch) {
			return nil, ErrExists
		}
		return nil, err
	}
	return s.Decode(data, resp.Header.Revision)
}

// Update replaces the object at key if its mod revision is still rev.
func (s *Store) Update(ctx context.Context, key string, rev int64, obj runtime.Object, claims Claims) (runtime.Object, error) {
	defer s.observe("update", timer())
	data, err := s.Encode(obj)
	if err != nil {
		return nil, err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(data))}
	resp, err := s.txn(ctx, cmps, ops, claims, key, rev)
	if err != nil {
		if errors.Is(err, errKeyMismatch) {
			return nil, s.missingOrConflict(ctx, key)
		}
		return nil, err
	}
	return s.Decode(data, resp.Header.Revision)
}

// Delete removes the object at key if its mod revision is still rev, and
// releases claims in the same transaction. It returns the deleted object with
// the revision of the deletion as its resourceVersion.
func (s *Store) Delete(ctx context.Context, key string, rev int64, claims Claims) (int64, error) {
	defer s.observe("delete", timer())
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	resp, err := s.txn(ctx, cmps, ops, claims, key, rev)
	if err != nil {
		if errors.Is(err, errKeyMismatch) {
			return 0, s.missingOrConflict(ctx, key)
		}
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (s *Store) missingOrConflict(ctx context.Context, key string) error {
	resp, err := s.client.Get(ctx, key, clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ErrNotFound
	}
	return ErrConflict
}

var errKeyMismatch = errors.New("object key precondition failed")

// txn runs cmps+claims → ops+claims; on failure it tells apart a failed object
// precondition (errKeyMismatch: the key's mod revision is not wantRev, 0
// meaning "must not exist") from claims that are taken (*ClaimedError). The
// object precondition wins: a create of an existing object is "already
// exists" even though its claims are naturally taken too.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op, claims Claims, key string, wantRev int64) (*clientv3.TxnResponse, error) {
	claimKeys := make([]string, 0, len(claims.Put))
	for k, v := range claims.Put {
		claimKeys = append(claimKeys, k)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		ops = append(ops, clientv3.OpPut(k, v))
	}
	for _, k := range claims.Release {
		ops = append(ops, clientv3.OpDelete(k))
	}
	guardKeys := make([]string, 0, len(claims.Unchanged))
	for k, rev := range claims.Unchanged {
		guardKeys = append(guardKeys, k)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
	}
	orElse := []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())}
	for _, k := range claimKeys {
		orElse = append(orElse, clientv3.OpGet(k, clientv3.WithKeysOnly()))
	}
	for _, k := range guardKeys {
		orElse = append(orElse, clientv3.OpGet(k, clientv3.WithKeysOnly()))
	}
	resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd txn on %s: %w", key, err)
	}
	if resp.Succeeded {
		for rev := resp.Header.Revision; ; {
			cur := s.lastWrite.Load()
			if rev <= cur || s.lastWrite.CompareAndSwap(cur, rev) {
				break
			}
		}
		return resp, nil
	}
	var curRev int64
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		curRev = kvs[0].ModRevision
	}
	if curRev != wantRev {
		return nil, errKeyMismatch
	}
	for i, r := range resp.Responses[1+len(claimKeys):] {
		var rev int64
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
			rev = kvs[0].ModRevision
		}
		if rev != claims.Unchanged[guardKeys[i]] {
			return nil, fmt.Errorf("%w: %s", ErrGuardChanged, guardKeys[i])
		}
	}
	var taken []string
	for i, r := range resp.Responses[1 : 1+len(claimKeys)] {
		if rr := r.GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			taken = append(taken, claimKeys[i])
		}
	}
	if len(taken) > 0 {
		return nil, &ClaimedError{Keys: taken}
	}
	return nil, errKeyMismatch
}

// ListOptions selects a page of a list read straight from etcd.
type ListOptions struct {
	// Rev: 0 = the latest revision; otherwise read exactly at Rev.
	Rev int64
	// Limit: 0 = no paging.
	Limit    int64
	Continue string
	// Filter keeps only objects it returns true for (selectors).
	Filter func(runtime.Object) bool
}

// ListResult is one page of objects.
type ListResult struct {
	Items    []runtime.Object
	Rev      int64
	Continue string
	// Remaining counts keys after this page (before filtering), when paged.
	Remaining *int64
}

type continueToken struct {
	Rev   int64  `json:"rv"`
	Start string `json:"start"`
}

// List reads objects under prefix (a namespace prefix or the whole resource).
func (s *Store) List(ctx context.Context, prefix string, opts ListOptions) (*ListResult, error) {
	defer s.observe("list", timer())
	start := prefix
	rev := opts.Rev
	if opts.Continue != "" {
		tok, err := decodeContinue(opts.Continue)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(tok.Start, strings.TrimPrefix(prefix, s.prefix)) {
			return nil, fmt.Errorf("%w: continue token does not match this list", ErrBadContinue)
		}
		start = s.prefix + tok.Start
		rev = tok.Rev
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	out := &ListResult{}
	for {
		ropts := []clientv3.OpOption{clientv3.WithRange(end)}
		if rev > 0 {
			ropts = append(ropts, clientv3.WithRev(rev))
		}
		batch := opts.Limit
		if batch > 0 {
			if opts.Filter != nil && batch < 500 {
				batch = 500
			}
			ropts = append(ropts, clientv3.WithLimit(batch+1))
		}
		resp, err := s.client.Get(ctx, start, ropts...)
		if err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return nil, ErrExpired
			}
			if errors.Is(err, rpctypes.ErrFutureRev) {
				return nil, ErrTooLarge
			}
			return nil, fmt.Errorf("etcd list %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		out.Rev = rev
		for i, kv := range resp.Kvs {
			if opts.Limit > 0 && int64(len(out.Items)) == opts.Limit {
				// Page full with keys left over: hand back a token that
				// resumes at this key at the same revision.
				out.Continue = encodeContinue(continueToken{Rev: rev, Start: strings.TrimPrefix(string(kv.Key), s.prefix)})
				rem := resp.Count - int64(i)
				out.Remaining = &rem
				return out, nil
			}
			obj, err := s.Decode(kv.Value, kv.ModRevision)
			if err != nil {
				return nil, err
			}
			if opts.Filter == nil || opts.Filter(obj) {
				out.Items = append(out.Items, obj)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ErrBadContinue: a continue token that could not be parsed.
var ErrBadContinue = errors.New("invalid continue token")

func encodeContinue(t continueToken) string {
	data, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(data)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("%w: %v", ErrBadContinue, err)
	}
	if err := json.Unmarshal(data, &t); err != nil || t.Rev <= 0 {
		return t, fmt.Errorf("%w: malformed", ErrBadContinue)
	}
	return t, nil
}

// CurrentRevision returns etcd's current revision (a quorum read).
func CurrentRevision(ctx context.Context, client *clientv3.Client) (int64, error) {
	resp, err := client.Get(ctx, "/registry/health-probe", clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("etcd read revision: %w", err)
	}
	return resp.Header.Revision, nil
}
