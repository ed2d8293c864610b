package apiserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodenet/nodenet/apiserver/allocator"
	"github.com/nodenet/nodenet/apiserver/pki"
	"github.com/nodenet/nodenet/apiserver/satoken"
	"github.com/nodenet/nodenet/apiserver/storage"
)

// Config is everything the API server needs; cmd/nodenet fills it from flags.
type Config struct {
	// DataDir holds embedded etcd, certificates, tokens, the service
	// account signing key (pki/sa.key) and the kubeconfig.
	DataDir string
	// EtcdServers, when set, replaces embedded etcd with an external cluster.
	EtcdServers []string
	// EtcdPrefix is the key prefix of every object (default /registry).
	EtcdPrefix string
	// BindAddress and SecurePort: where HTTPS is served (port 0 = any free).
	BindAddress string
	SecurePort  int
	// Listener, when set, is used instead of BindAddress:SecurePort (for
	// example a socket opened inside another network namespace).
	Listener net.Listener
	// AdvertiseAddress is the IP written into the kubeconfig and the
	// "kubernetes" Service's endpoints (default: the bind address or 127.0.0.1).
	AdvertiseAddress string
	// InsecurePort > 0 serves plain HTTP without authentication on 127.0.0.1.
	InsecurePort int
	// ServiceClusterIPRanges: one CIDR, or two of different families
	// (cidrlist.DualStack); default 10.96.0.0/12.
	ServiceClusterIPRanges []netip.Prefix
	// ServiceNodePortRange; the zero value means 30000-32767.
	ServiceNodePortRange allocator.PortRange
	// TokenAuthFile is a kube-style token CSV (token,user,uid,"group1,group2");
	// empty means DataDir/tokens.csv, created with an admin token if missing.
	TokenAuthFile string
	// TLSSANs are extra names/IPs for the serving certificate.
	TLSSANs []string
	// EtcdUnsafeNoFsync runs embedded etcd without fsync (etcd's
	// --unsafe-no-fsync): its data outlives a crash of this process, which
	// leaves it in the page cache, but not a crash of the machine. For
	// clusters that do not outlive the machine anyway (`nodenet up`'s
	// network namespaces), where etcd shares one disk with every node's pod
	// churn and its fsyncs, queued behind that churn's journal commits,
	// took up to seconds.
	EtcdUnsafeNoFsync bool
	// Profiling serves Go's /debug/pprof/ to system:masters (kube-apiserver's
	// --profiling, which defaults to on and is gated by RBAC on the
	// non-resource URL; here it is off unless asked for, since this server
	// authorizes non-resource URLs for no one but lets every user read
	// them).
	Profiling bool
	// WatchCacheSize is the number of events kept per resource for watches
	// that resume from an older resourceVersion.
	WatchCacheSize int
	// CompactionInterval: how often old etcd revisions are compacted.
	CompactionInterval time.Duration
	// BookmarkInterval: how often watchers that allow bookmarks get one.
	BookmarkInterval time.Duration
	Logger           *slog.Logger
	// Authorizer, when set, decides every resource request and access
	// review instead of the default (the token file's users may do
	// everything, service accounts what the stored RBAC objects grant
	// them); tests use it to hold the DaemonSet's RBAC rules to
	// what the daemons really ask for.
	Authorizer Authorizer
	// DialNode opens connections to node agents (pods/log), like
	// kube-apiserver's egress selector for the "cluster" network; nil
	// dials directly.
	DialNode func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Defaults of Config, as kube-apiserver's flags have them.
var (
	DefaultServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/12")
	DefaultServiceNodePortRange  = allocator.PortRange{Base: 30000, Size: 2768}
)

func (c *Config) setDefaults() {
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = "/registry"
	}
	if c.BindAddress == "" {
		c.BindAddress = "127.0.0.1"
	}
	if len(c.ServiceClusterIPRanges) == 0 {
		c.ServiceClusterIPRanges = []netip.Prefix{DefaultServiceClusterIPRange}
	}
	if c.ServiceNodePortRange == (allocator.PortRange{}) {
		c.ServiceNodePortRange = DefaultServiceNodePortRange
	}
	if c.WatchCacheSize == 0 {
		c.WatchCacheSize = 10000
	}
	if c.CompactionInterval == 0 {
		c.CompactionInterval = 5 * time.Minute
	}
	if c.BookmarkInterval == 0 {
		c.BookmarkInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// advertiseIP returns the address written into the kubeconfig and the
// "kubernetes" Service's endpoints: --advertise-address, or else the bind
// address (127.0.0.1 when that is unspecified). Like kube-apiserver, it
// refuses an address pods could never reach as an endpoint, naming the flag
// to set; a loopback address is allowed (the Service then has no endpoints).
func (c *Config) advertiseIP() (string, error) {
	flag, value := "--advertise-address", c.AdvertiseAddress
	if value == "" {
		flag, value = "--bind-address", c.BindAddress
		if c.Listener != nil {
			flag, value = "the listener's address", c.Listener.Addr().(*net.TCPAddr).IP.String()
		}
	}
	ip := net.ParseIP(value)
	if ip == nil {
		return "", fmt.Errorf("%s %q is not an IP address", flag, value)
	}
	if c.AdvertiseAddress == "" && ip.IsUnspecified() {
		return "127.0.0.1", nil
	}
	var why string
	switch {
	case ip.IsUnspecified():
		why = "is unspecified"
	case ip.IsLinkLocalUnicast():
		why = "is link-local (169.254.0.0/16, fe80::/10)"
	case ip.IsMulticast():
		why = "is a multicast address"
	default:
		return ip.String(), nil
	}
	if flag == "--advertise-address" {
		return "", fmt.Errorf("--advertise-address %s %s: it cannot be the endpoint of the \"kubernetes\" Service; set --advertise-address to an address of this host that pods can reach", value, why)
	}
	return "", fmt.Errorf("%s %s %s and --advertise-address is not set: the address cannot be the endpoint of the \"kubernetes\" Service; set --advertise-address to an address of this host that pods can reach", flag, value, why)
}

// Server is a running API server.
type Server struct {
	cfg         Config
	log         *slog.Logger
	resources   []*resource
	byGV        map[schema.GroupVersion]map[string]*resource
	nsRes       *resource
	svcRes      *resource
	services    *serviceAllocator
	advertise   string // host:port
	advertiseIP string // from advertiseIP(), without the port
	metrics     *metrics
	auth        *tokenAuth
	saKey       *satoken.Key // signs and verifies service account tokens
	authz       authorizer

	etcd    *embed.Etcd
	client  *clientv3.Client
	http    *http.Server
	insec   *http.Server
	url     string
	kubecfg string

	openapi    openAPIDocs
	ready      atomic.Bool
	namespaces *nsFinalizer
	nodes      nodeConnector // pods/log to node agents (nodeproxy.go)
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	done       chan struct{}
}

var grNamespaces = schema.GroupResource{Resource: "namespaces"}

// Start brings the server up — etcd, caches, bootstrap objects, HTTPS — and
// returns once it serves requests. Stop shuts it down.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	cfg.setDefaults()
	if cfg.DataDir == "" {
		return nil, errors.New("apiserver: a data dir is required")
	}
	// Checked before anything starts: an address that cannot be the
	// "kubernetes" Service's endpoint would otherwise fail bootstrap late,
	// with an EndpointSlice validation error that names no flag.
	advertiseIP, err := cfg.advertiseIP()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := cfg.ServiceNodePortRange.Validate(); err != nil {
		return nil, fmt.Errorf("--service-node-port-range: %w", err)
	}
	svcAlloc, err := newServiceAllocator(cfg.ServiceClusterIPRanges, cfg.ServiceNodePortRange)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, advertiseIP: advertiseIP, log: cfg.Logger, services: svcAlloc, metrics: newMetrics(), done: make(chan struct{})}
	s.authz = serviceAccountRBAC{s: s, others: nodeAuthorizer{s: s, others: allowAll{}}}
	if cfg.Authorizer != nil {
		s.authz = custom{cfg.Authorizer}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	// Each phase's duration goes into the ready line: a restart's time to
	// /readyz is what the daemons wait for, and where it goes matters.
	started := time.Now()
	if err := s.connectEtcd(ctx); err != nil {
		return nil, err
	}
	etcdUp := time.Since(started)
	if err := svcAlloc.load(ctx, s.client); err != nil {
		return nil, err
	}
	if err := migrateEventsV1(ctx, s.client, cfg.EtcdPrefix, s.log); err != nil {
		return nil, fmt.Errorf("migrate events.k8s.io events: %w", err)
	}
	s.resources = newResources(svcAlloc)
	s.byGV = map[schema.GroupVersion]map[string]*resource{}
	for _, r := range s.resources {
		if s.byGV[r.gv] == nil {
			s.byGV[r.gv] = map[string]*resource{}
		}
		s.byGV[r.gv][r.plural] = r
		if r.storedAs != nil {
			// A view is listed after the resource it serves, whose store
			// and cache it shares.
			r.store, r.cache = r.storedAs.store, r.storedAs.cache
			continue
		}
		prefix := cfg.EtcdPrefix + "/" + r.plural + "/"
		if r.gv.Group != "" {
			prefix = cfg.EtcdPrefix + "/" + r.gv.Group + "/" + r.plural + "/"
		}
		r.store = storage.NewStore(s.client, prefix, r.gvk(), r.newObj)
		r.store.Observe = s.metrics.observeEtcd
		r.cache = storage.NewCache(r.store, cfg.WatchCacheSize, s.log.With("resource", r.plural))
		switch {
		case r.kind == "Namespace":
			s.nsRes = r
		case r.kind == "Service":
			s.svcRes = r
		}
		s.goRun(func() { r.cache.Run(runCtx) })
	}
	for _, r := range s.resources {
		if err := r.cache.WaitSynced(ctx); err != nil {
			return nil, fmt.Errorf("fill watch cache for %s: %w", r.plural, err)
		}
	}
	cachesFilled := time.Since(started)
	s.wireIPAddresses()
	s.namespaces = newNSFinalizer(s)
	s.goRun(func() { s.namespaces.run(runCtx) })
	if err := s.listen(ctx); err != nil {
		return nil, err
	}
	if err := s.bootstrap(ctx); err != nil {
		return nil, err
	}
	s.goRun(func() { s.compactLoop(runCtx) })
	s.goRun(func() { s.bookmarkLoop(runCtx) })
	s.goRun(func() { s.reloadAllocations(runCtx) })
	s.ready.Store(true)
	s.log.Info("API server ready", "url", s.url, "kubeconfig", s.kubecfg,
		"etcd", etcdUp.Round(time.Millisecond), "caches", cachesFilled.Round(time.Millisecond), "total", time.Since(started).Round(time.Millisecond))
	return s, nil
}

func (s *Server) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// URL is the HTTPS address clients use.
func (s *Server) URL() string { return s.url }

// KubeconfigPath is the admin kubeconfig written into the data dir.
func (s *Server) KubeconfigPath() string { return s.kubecfg }

// EtcdClient exposes the store, for tests and tools that inspect it.
func (s *Server) EtcdClient() *clientv3.Client { return s.client }

// Done is closed when Stop has finished.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop ends watches, drains requests (up to 5 s) and closes etcd.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.cancel != nil {
		s.cancel()
	}
	for _, h := range []*http.Server{s.http, s.insec} {
		if h != nil {
			_ = h.Shutdown(ctx)
		}
	}
	s.wg.Wait()
	// Closing the client before the embedded server avoids a 7 s stall.
	if s.client != nil {
		_ = s.client.Close()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	close(s.done)
}

func (s *Server) connectEtcd(ctx context.Context) error {
	endpoints := s.cfg.EtcdServers
	if len(endpoints) == 0 {
		e, err := startEmbeddedEtcd(filepath.Join(s.cfg.DataDir, "etcd"), s.cfg.EtcdUnsafeNoFsync)
		if err != nil {
			return err
		}
		s.etcd = e
		endpoints = []string{"http://" + e.Clients[0].Addr().String()}
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:          endpoints,
		DialTimeout:        10 * time.Second,
		MaxCallSendMsgSize: 32 << 20,
		MaxCallRecvMsgSize: 256 << 20,
		Logger:             zap.NewNop(),
		DialOptions:        []grpc.DialOption{},
	})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	s.client = client
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := storage.CurrentRevision(cctx, client); err != nil {
		return fmt.Errorf("etcd %v not reachable: %w", endpoints, err)
	}
	return nil
}

// startEmbeddedEtcd runs a single-member etcd on loopback ports chosen at
// random (retrying if another process takes one first).
func startEmbeddedEtcd(dir string, noFsync bool) (*embed.Etcd, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		cfg := embed.NewConfig()
		cfg.Dir = dir
		cfg.Name = "nodenet"
		cfg.LogLevel = "error"
		cfg.Logger = "zap"
		cfg.LogOutputs = []string{filepath.Join(filepath.Dir(dir), "etcd.log")}
		cfg.QuotaBackendBytes = 8 << 30
		cfg.UnsafeNoFsync = noFsync
		// One member, never more: its election timeout only decides how
		// long a restarted etcd waits before it elects itself, which is
		// most of an API server restart (default 100/1000 ms: 0.1–1 s on
		// this machine; 10/100 ms: 40–160 ms). With no peer there is no
		// heartbeat to miss; the faster tick costs about 4 ms of CPU a
		// second.
		cfg.TickMs, cfg.ElectionMs = 10, 100
		clientURL, peerURL, err := loopbackURLs()
		if err != nil {
			return nil, err
		}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = clientURL, clientURL
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = peerURL, peerURL
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, nil
		case <-time.After(60 * time.Second):
			e.Close()
			return nil, errors.New("embedded etcd did not become ready in 60s")
		}
	}
	return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, lastErr)
}

func (s *Server) listen(ctx context.Context) error {
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.SecurePort)))
		if err != nil {
			return fmt.Errorf("listen on %s:%d: %w", s.cfg.BindAddress, s.cfg.SecurePort, err)
		}
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// Clients on this machine use the listening address; pods and the
	// "kubernetes" Service use the advertised one.
	local := ln.Addr().(*net.TCPAddr).IP.String()
	if ip := net.ParseIP(local); ip == nil || ip.IsUnspecified() {
		local = "127.0.0.1"
	}
	host := s.advertiseIP
	s.advertise = net.JoinHostPort(host, strconv.Itoa(port))
	s.url = "https://" + net.JoinHostPort(local, strconv.Itoa(port))
	kubeSvcIP := s.services.ranges[s.services.primary].At(1).String()
	sans := append([]string{"127.0.0.1", "::1", "localhost", host, local, kubeSvcIP, "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, s.cfg.TLSSANs...)
	cert, caPEM, err := pki.Ensure(pki.FilesIn(filepath.Join(s.cfg.DataDir, "pki")), sans)
	if err != nil {
		ln.Close()
		return fmt.Errorf("prepare TLS: %w", err)
	}
	auth, adminToken, err := loadTokens(s.cfg.TokenAuthFile, filepath.Join(s.cfg.DataDir, "tokens.csv"))
	if err != nil {
		ln.Close()
		return err
	}
	s.auth = auth
	if s.saKey, err = satoken.LoadOrCreate(filepath.Join(s.cfg.DataDir, "pki", "sa.key")); err != nil {
		ln.Close()
		return err
	}
	s.kubecfg = filepath.Join(s.cfg.DataDir, "admin.kubeconfig")
	if adminToken != "" {
		if err := pki.WriteFileAtomic(s.kubecfg, pki.Kubeconfig(s.url, caPEM, "admin", adminToken), 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("write admin kubeconfig: %w", err)
		}
	}
	handler := s.instrument(s.authenticate(http.HandlerFunc(s.route)))
	s.http = &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	tlsLn := tls.NewListener(ln, s.http.TLSConfig)
	s.goRun(func() {
		if err := s.http.Serve(tlsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTPS server failed", "err", err)
		}
	})
	if s.cfg.InsecurePort > 0 {
		iln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.InsecurePort)))
		if err != nil {
			return fmt.Errorf("listen on 127.0.0.1:%d: %w", s.cfg.InsecurePort, err)
		}
		s.insec = &http.Server{Handler: s.instrument(http.HandlerFunc(s.route)), ReadHeaderTimeout: 30 * time.Second}
		s.goRun(func() {
			if err := s.insec.Serve(iln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("HTTP server failed", "err", err)
			}
		})
	}
	return nil
}

// route serves health, version, metrics, discovery and resources.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/livez":
		s.health(w, r, false)
		return
	case "/readyz":
		s.health(w, r, true)
		return
	case "/version":
		writeJSON(w, http.StatusOK, Version)
		return
	case "/metrics":
		s.metrics.handler().ServeHTTP(w, r)
		return
	}
	if s.cfg.Profiling && strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
		s.serveProfile(w, r)
		return
	}
	if r.Method == http.MethodGet && (s.serveDiscovery(w, r) || s.serveOpenAPI(w, r)) {
		return
	}
	if s.serveReview(w, r) {
		return
	}
	s.serveResource(w, r)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, readiness bool) {
	if readiness && !s.ready.Load() {
		http.Error(w, "[-]caches not synced or bootstrap pending\nreadyz check failed", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := storage.CurrentRevision(ctx, s.client); err != nil {
		http.Error(w, "[-]etcd failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// respond writes obj as JSON, or as a meta.k8s.io Table when the client asks
// for one (kubectl get).
func (s *Server) respond(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	if wantsTable(r) {
		if req, err := s.parsePath(r.URL.Path); err == nil {
			if t := s.toTable(req.res, obj, r); t != nil {
				writeJSON(w, code, t)
				return
			}
		}
	}
	writeJSON(w, code, obj)
}

// fail writes err as a metav1.Status with its HTTP code.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		s.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		st = apierrors.NewInternalError(err)
	}
	status := st.Status()
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if status.Code == 0 {
		status.Code = http.StatusInternalServerError
	}
	writeJSON(w, int(status.Code), &status)
}
