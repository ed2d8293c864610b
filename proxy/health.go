package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ListenFunc opens a TCP listener (tests open it inside their namespace).
type ListenFunc func(ctx context.Context, addr string) (net.Listener, error)

// DefaultListen listens in the current network namespace.
func DefaultListen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// healthState tracks whether syncs keep up, for /healthz and the
// healthCheckNodePort answers (kube-proxy semantics: unhealthy when a change
// has waited for a sync longer than the allowed staleness).
type healthState struct {
	staleAfter  time.Duration
	lastQueued  atomic.Int64 // unix nanos of the oldest unsynced change, 0 if none
	lastSuccess atomic.Int64
	now         func() time.Time
}

func (h *healthState) queued() {
	h.lastQueued.CompareAndSwap(0, h.now().UnixNano())
}

func (h *healthState) synced(pendingRemain bool) {
	h.lastSuccess.Store(h.now().UnixNano())
	if !pendingRemain {
		h.lastQueued.Store(0)
	} else {
		h.lastQueued.Store(h.now().UnixNano())
	}
}

// healthy reports ok and a reason.
func (h *healthState) healthy() (bool, string) {
	q := h.lastQueued.Load()
	if q != 0 && h.now().Sub(time.Unix(0, q)) > h.staleAfter {
		return false, fmt.Sprintf("changes pending for more than %s", h.staleAfter)
	}
	return true, "ok"
}

// healthzHandler serves /healthz, /livez and /readyz.
func (h *healthState) handler() http.Handler {
	mux := http.NewServeMux()
	serve := func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := h.healthy()
		w.Header().Set("Content-Type", "application/json")
		last := ""
		if s := h.lastSuccess.Load(); s != 0 {
			last = time.Unix(0, s).UTC().Format(time.RFC3339Nano)
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"healthy": ok, "reason": reason, "lastUpdated": last})
	}
	mux.HandleFunc("/healthz", serve)
	mux.HandleFunc("/livez", serve)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if h.lastSuccess.Load() == 0 {
			http.Error(w, "no sync yet", http.StatusServiceUnavailable)
			return
		}
		serve(w, r)
	})
	return mux
}

// hcService is what one healthCheckNodePort reports.
type hcService struct {
	name  types.NamespacedName
	local int
}

// healthCheckServers runs one HTTP server per healthCheckNodePort of an
// eTP=Local service: 200 with the local endpoint count while there are local
// endpoints, 503 otherwise, so external load balancers skip this node.
type healthCheckServers struct {
	listen ListenFunc
	log    *slog.Logger
	health *healthState

	mu      sync.Mutex
	servers map[uint16]*hcServer
}

type hcServer struct {
	srv   *http.Server
	state atomic.Pointer[hcService]
}

// update reconciles the servers with the wanted ports; it never blocks on
// the network for long and logs (rather than fails) ports it cannot open,
// retrying them on the next update.
func (s *healthCheckServers) update(ctx context.Context, want map[uint16]hcService) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.servers == nil {
		s.servers = map[uint16]*hcServer{}
	}
	for port, hs := range s.servers {
		if _, ok := want[port]; !ok {
			_ = hs.srv.Close()
			delete(s.servers, port)
		}
	}
	for port, svc := range want {
		svc := svc
		if hs := s.servers[port]; hs != nil {
			hs.state.Store(&svc)
			continue
		}
		ln, err := s.listen(ctx, net.JoinHostPort("", strconv.Itoa(int(port))))
		if err != nil {
			s.log.Warn("open health check node port", "port", port, "service", svc.name, "err", err)
			continue
		}
		hs := &hcServer{}
		hs.state.Store(&svc)
		hs.srv = &http.Server{Handler: s.handler(hs), ReadHeaderTimeout: 5 * time.Second}
		s.servers[port] = hs
		go func() {
			if err := hs.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Warn("health check node port server", "port", port, "err", err)
			}
		}()
	}
}

func (s *healthCheckServers) handler(hs *hcServer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := hs.state.Load()
		ok, _ := s.health.healthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(st.local))
		if st.local == 0 || !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"service":             map[string]string{"namespace": st.name.Namespace, "name": st.name.Name},
			"localEndpoints":      st.local,
			"serviceProxyHealthy": ok,
		})
	})
}

// closeAll stops every server (the proxy is shutting down).
func (s *healthCheckServers) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for port, hs := range s.servers {
		_ = hs.srv.Close()
		delete(s.servers, port)
	}
}

// healthChecks derives the wanted health check ports from the snapshots.
func healthChecks(snaps []*Snapshot) map[uint16]hcService {
	want := map[uint16]hcService{}
	seen := map[uint16]map[string]bool{}
	for _, snap := range snaps {
		if snap == nil {
			continue
		}
		for _, sp := range snap.Services {
			if sp.HealthCheckNodePort == 0 || !sp.ExternalPolicyLocal {
				continue
			}
			p := sp.HealthCheckNodePort
			hs := want[p]
			hs.name = sp.Name.NamespacedName
			if seen[p] == nil {
				seen[p] = map[string]bool{}
			}
			// Count endpoints (not endpoint ports) once across ports and families.
			for _, e := range sp.Selected.Local {
				if k := e.IP.String(); !seen[p][k] {
					seen[p][k] = true
					hs.local++
				}
			}
			want[p] = hs
		}
	}
	return want
}
