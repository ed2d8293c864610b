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

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ListenFunc opens a TCP listener (tests open it inside their namespace).
type ListenFunc func(ctx context.Context, addr string) (net.Listener, error)

// DefaultListen listens in the current network namespace.
func DefaultListen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// healthState is kube-proxy's ProxyHealthServer state: per family, when
// the last sync succeeded and since when a change has waited for one.
// Unhealthy when a change has waited longer than staleAfter.
type healthState struct {
	staleAfter time.Duration
	now        func() time.Time
	// node returns this node's object (nil when unknown), for
	// nodeEligible.
	node func() *v1.Node
	// metrics counts /healthz and /livez answers (nil: not counted).
	metrics *Metrics

	// everSynced is set by the first successful sync (for /readyz).
	everSynced atomic.Bool

	mu           sync.Mutex
	lastUpdated  map[Family]time.Time
	oldestQueued map[Family]time.Time
}

func newHealthState(staleAfter time.Duration, now func() time.Time) *healthState {
	return &healthState{staleAfter: staleAfter, now: now, node: func() *v1.Node { return nil },
		lastUpdated: map[Family]time.Time{}, oldestQueued: map[Family]time.Time{}}
}

// queued records that a change for f waits for a sync.
func (h *healthState) queued(f Family) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, set := h.oldestQueued[f]; !set {
		h.oldestQueued[f] = h.now()
	}
}

// updated records a successful sync of f (or the start of the sync loop).
func (h *healthState) updated(f Family) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.oldestQueued, f)
	h.lastUpdated[f] = h.now()
}

// proxyHealth is kube-proxy's /healthz and /livez body (same fields, same
// order, same JSON names).
type proxyHealth struct {
	LastUpdated  time.Time                      `json:"lastUpdated"`
	CurrentTime  time.Time                      `json:"currentTime"`
	NodeEligible *bool                          `json:"nodeEligible,omitempty"`
	Healthy      bool                           `json:"healthy"`
	Status       map[v1.IPFamily]familyHealthJS `json:"status,omitempty"`
}

type familyHealthJS struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// health evaluates the state as kube-proxy does: only families that have
// synced (or started their loop) count, and each is unhealthy when its
// oldest queued change is older than staleAfter.
func (h *healthState) health() proxyHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := proxyHealth{Healthy: true, Status: map[v1.IPFamily]familyHealthJS{}, CurrentTime: h.now()}
	for f, last := range h.lastUpdated {
		if last.After(out.LastUpdated) {
			out.LastUpdated = last
		}
		fh := familyHealthJS{LastUpdated: last, Healthy: true}
		if q, set := h.oldestQueued[f]; set && out.CurrentTime.Sub(q) >= h.staleAfter {
			fh.Healthy, out.Healthy = false, false
		}
		out.Status[v1.IPFamily(f.String())] = fh
	}
	return out
}

// healthy reports whether syncs keep up, and why not.
func (h *healthState) healthy() (bool, string) {
	if !h.health().Healthy {
		return false, fmt.Sprintf("changes pending for more than %s", h.staleAfter)
	}
	return true, "ok"
}

// nodeEligible is kube-proxy's: the node exists, is not being deleted and
// is not tainted for deletion by the cluster autoscaler, so load
// balancers probing /healthz drain a node that is going away.
func (h *healthState) nodeEligible() bool {
	n := h.node()
	if n == nil || !n.DeletionTimestamp.IsZero() {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			return false
		}
	}
	return true
}

const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// handler serves kube-proxy's /healthz (sync health and node eligibility)
// and /livez (sync health only) with its bodies and status codes, and
// /readyz (nodenet's: unready until the first successful sync).
func (h *healthState) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		hl := h.health()
		eligible := h.nodeEligible()
		hl.NodeEligible = &eligible
		h.write(w, hl, hl.Healthy && eligible, "healthz")
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		hl := h.health()
		h.write(w, hl, hl.Healthy, "livez")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.everSynced.Load() {
			http.Error(w, "no sync yet", http.StatusServiceUnavailable)
			return
		}
		hl := h.health()
		h.write(w, hl, hl.Healthy, "")
	})
	return mux
}

func (h *healthState) write(w http.ResponseWriter, hl proxyHealth, ok bool, probe string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	} else {
		// kube-proxy reports the time of the answer as lastUpdated when
		// healthy.
		hl.LastUpdated = h.now()
	}
	if h.metrics != nil {
		switch probe {
		case "healthz":
			h.metrics.ProxyHealthzTotal.WithLabelValues(strconv.Itoa(code)).Inc()
		case "livez":
			h.metrics.ProxyLivezTotal.WithLabelValues(strconv.Itoa(code)).Inc()
		}
	}
	w.WriteHeader(code)
	out, _ := json.Marshal(hl)
	_, _ = w.Write(out)
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

// healthChecks derives the wanted health check ports from each family's
// ports that have one (familyState.healthChecked).
func healthChecks(families []map[ServicePortName]*ServicePort) map[uint16]hcService {
	want := map[uint16]hcService{}
	seen := map[uint16]map[string]bool{}
	for _, ports := range families {
		for _, sp := range ports {
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
