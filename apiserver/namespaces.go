package apiserver

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/apiserver/storage"
)

// nsFinalizer empties terminating namespaces and then removes them — the
// namespace controller's job, done inside the server so a bare API server
// behaves like a cluster.
type nsFinalizer struct {
	s     *Server
	queue chan string
}

func newNSFinalizer(s *Server) *nsFinalizer {
	return &nsFinalizer{s: s, queue: make(chan string, 1024)}
}

func (f *nsFinalizer) enqueue(name string) {
	select {
	case f.queue <- name:
	default:
		// The periodic sweep picks it up.
	}
}

func (f *nsFinalizer) run(ctx context.Context) {
	sweep := time.NewTicker(30 * time.Second)
	defer sweep.Stop()
	f.sweep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-f.queue:
			if err := f.finalize(ctx, name); err != nil && ctx.Err() == nil {
				f.s.log.Warn("finalize namespace", "namespace", name, "err", err)
				time.AfterFunc(2*time.Second, func() { f.enqueue(name) })
			}
		case <-sweep.C:
			f.sweep(ctx)
		}
	}
}

// sweep re-queues namespaces left terminating (say, by a restart).
func (f *nsFinalizer) sweep(ctx context.Context) {
	objs, _, err := f.s.nsRes.cache.List(ctx, f.s.nsRes.store.Prefix(), 0, nil)
	if err != nil {
		return
	}
	for _, o := range objs {
		if acc, _ := meta.Accessor(o); acc.GetDeletionTimestamp() != nil {
			f.enqueue(acc.GetName())
		}
	}
}

func (f *nsFinalizer) finalize(ctx context.Context, name string) error {
	zero := int64(0)
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &zero}
	for _, r := range f.s.resources {
		if !r.namespaced || r.storedAs != nil {
			continue // a view's objects go with the resource it serves
		}
		res, err := r.store.List(ctx, r.store.NamespacePrefix(name), storage.ListOptions{})
		if err != nil {
			return err
		}
		for _, obj := range res.Items {
			acc, _ := meta.Accessor(obj)
			req := &apiRequest{res: r, namespace: name, name: acc.GetName()}
			if _, err := f.s.deleteObject(ctx, req, opts); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if len(acc.GetFinalizers()) > 0 {
				return errors.New("waiting for finalizers of " + r.plural + "/" + acc.GetName())
			}
		}
	}
	cur, err := f.s.nsRes.store.Get(ctx, f.s.nsRes.store.Key("", name))
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	req := &apiRequest{res: f.s.nsRes, name: name}
	_, _, err = f.s.deleteNow(ctx, req, cur)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
