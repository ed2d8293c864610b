package apiserver

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// serveProfile is /debug/pprof/ (Config.Profiling): Go's profiles of this
// process, for the operator only. A profile shows what the server spends
// its time on, which the metrics cannot say when it slows down under load.
func (s *Server) serveProfile(w http.ResponseWriter, r *http.Request) {
	u := requestUser(r) // the insecure port's user is system:masters, as for the rest of the API there
	if !slices.Contains(u.Groups, "system:masters") {
		s.fail(w, r, apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("User %q cannot get path %q: profiles are for system:masters", u.Name, r.URL.Path)))
		return
	}
	switch name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/"); name {
	case "profile":
		pprof.Profile(w, r)
	case "trace":
		pprof.Trace(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	default:
		// The index, and goroutine, heap, allocs, block, mutex … by name.
		pprof.Index(w, r)
	}
}
