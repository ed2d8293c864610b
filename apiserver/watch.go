package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodenet/nodenet/apiserver/storage"
)

// defaultWatchTimeout is used when the client does not say; kube-apiserver
// picks a random value around 30 minutes for the same reason: watches must
// end now and then so that load spreads after a server restart.
const defaultWatchTimeout = 30 * time.Minute

func (s *Server) watch(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	q := r.URL.Query()
	sel, err := parseSelector(q, req.res, req.name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var fromRev int64
	rv := q.Get("resourceVersion")
	if rv != "" {
		if fromRev, err = strconv.ParseInt(rv, 10, 64); err != nil || fromRev < 0 {
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rv)))
			return
		}
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	sendInitial := q.Get("sendInitialEvents") == "true"
	if sendInitial && (!bookmarks || q.Get("resourceVersionMatch") != "NotOlderThan") {
		s.fail(w, r, apierrors.NewBadRequest("sendInitialEvents requires allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan"))
		return
	}
	timeout := defaultWatchTimeout
	if v := q.Get("timeoutSeconds"); v != "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs < 0 {
			s.fail(w, r, apierrors.NewBadRequest("timeoutSeconds must be a non-negative integer"))
			return
		}
		if secs > 0 {
			timeout = time.Duration(secs) * time.Second
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	prefix := req.res.store.NamespacePrefix(req.namespace)
	startRev := fromRev
	if sendInitial {
		// Initial state first (at a revision not older than fromRev), then a
		// bookmark that marks its end, then changes.
		if err := req.res.cache.WaitRevision(ctx, fromRev); err != nil {
			s.fail(w, r, s.storageError(req, err))
			return
		}
		startRev = 0
	}
	watcher, err := req.res.cache.Watch(ctx, prefix, startRev, bookmarks)
	if err != nil && !errors.Is(err, storage.ErrExpired) {
		s.fail(w, r, s.storageError(req, err))
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	enc := &watchEncoder{w: w, res: req.res}
	if wantsTable(r) {
		enc.table = func(o runtime.Object) ([]byte, error) { return json.Marshal(s.toTable(req.res, o, r)) }
	}
	if errors.Is(err, storage.ErrExpired) {
		// As kube-apiserver: the watch opens, then says 410 Gone in an ERROR
		// event, which makes informers relist.
		enc.status(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", fromRev)))
		return
	}
	s.metrics.watchers.WithLabelValues(req.res.plural).Inc()
	defer s.metrics.watchers.WithLabelValues(req.res.plural).Dec()
	defer watcher.Stop()

	// With sendInitialEvents the end of the replayed state is marked by a
	// bookmark carrying the initial-events-end annotation.
	initialLeft := -1
	if sendInitial {
		initialLeft = watcher.InitialCount()
		if initialLeft == 0 {
			enc.bookmark(watcher.InitialRev(), true)
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	for {
		batch, err := watcher.Next(ctx)
		if err != nil {
			if errors.Is(err, storage.ErrExpired) {
				enc.status(apierrors.NewResourceExpired("the watch cache was reset; relist"))
			} else if ctx.Err() == nil && r.Context().Err() == nil && !errors.Is(err, storage.ErrShuttingDown) {
				enc.status(apierrors.NewInternalError(err))
			}
			return
		}
		for _, e := range batch {
			if err := enc.event(e, sel); err != nil {
				return
			}
			if initialLeft > 0 {
				if initialLeft--; initialLeft == 0 {
					enc.bookmark(watcher.InitialRev(), true)
				}
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		if enc.err != nil {
			return
		}
	}
}

// watchEncoder writes newline-delimited metav1.WatchEvent JSON.
type watchEncoder struct {
	// table, when set, renders each object as a Table (kubectl get -w).
	table func(runtime.Object) ([]byte, error)
	w     http.ResponseWriter
	res   *resource
	buf   bytes.Buffer
	err   error
}

func (e *watchEncoder) write(typ watch.EventType, raw []byte) error {
	if e.err != nil {
		return e.err
	}
	e.buf.Reset()
	e.buf.WriteString(`{"type":"`)
	e.buf.WriteString(string(typ))
	e.buf.WriteString(`","object":`)
	e.buf.Write(raw)
	e.buf.WriteString("}\n")
	_, e.err = e.w.Write(e.buf.Bytes())
	return e.err
}

// event sends e as the client's selector sees it: an object that starts or
// stops matching is reported as ADDED or DELETED, as kube-apiserver does.
func (e *watchEncoder) event(ev *storage.Event, sel *selector) error {
	if ev.Type == watch.Bookmark {
		return e.bookmark(ev.Rev, false)
	}
	typ := ev.Type
	if !sel.empty() {
		cur := sel.matches(ev.Object)
		prev := ev.PrevObject != nil && sel.matches(ev.PrevObject)
		switch {
		case ev.Type == watch.Modified && cur && !prev:
			typ = watch.Added
		case ev.Type == watch.Modified && !cur && prev:
			typ = watch.Deleted
		case ev.Type == watch.Deleted && !prev:
			return nil
		case !cur && ev.Type != watch.Deleted:
			return nil
		}
	}
	raw := ev.Encoded()
	var err error
	switch {
	case e.table != nil:
		raw, err = e.table(e.res.out(ev.Object))
	case e.res.fromStored != nil:
		// A view's objects are converted per watcher; views are rare
		// (events.k8s.io) and their watchers few.
		raw, err = json.Marshal(e.res.out(ev.Object))
	}
	if err != nil {
		return fmt.Errorf("encode watch event: %w", err)
	}
	if raw == nil {
		return fmt.Errorf("encode watch event")
	}
	return e.write(typ, raw)
}

func (e *watchEncoder) bookmark(rev int64, initialEnd bool) error {
	obj := e.res.newObj()
	obj.GetObjectKind().SetGroupVersionKind(e.res.gvk())
	acc, _ := meta.Accessor(obj)
	acc.SetResourceVersion(strconv.FormatInt(rev, 10))
	if initialEnd {
		acc.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return e.write(watch.Bookmark, raw)
}

func (e *watchEncoder) status(err error) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return
	}
	status := st.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	raw, mErr := json.Marshal(&status)
	if mErr != nil {
		return
	}
	_ = e.write(watch.Error, raw)
}
