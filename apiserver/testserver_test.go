package apiserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/apiserver"
)

// testServer runs a real API server with embedded etcd in a temp dir.
type testServer struct {
	*apiserver.Server
	dir    string
	cfg    apiserver.Config
	config *rest.Config
	client kubernetes.Interface
}

func testLogger() *slog.Logger {
	if os.Getenv("NODENET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServer starts a server; mutate may change the config first.
func startServer(t testing.TB, mutate ...func(*apiserver.Config)) *testServer {
	t.Helper()
	cfg := apiserver.Config{
		DataDir:    t.TempDir(),
		SecurePort: 0,
		Logger:     testLogger(),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	ts := &testServer{dir: cfg.DataDir, cfg: cfg}
	ts.start(t)
	t.Cleanup(func() { ts.Stop() })
	return ts
}

func (ts *testServer) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := apiserver.Start(ctx, ts.cfg)
	if err != nil {
		t.Fatalf("start API server: %v", err)
	}
	ts.Server = srv
	// Keep the port so a restart serves where existing clients look.
	if u, err := url.Parse(srv.URL()); err == nil {
		ts.cfg.SecurePort, _ = strconv.Atoi(u.Port())
	}
	ts.config = restConfig(t, srv.KubeconfigPath())
	ts.client = kubernetes.NewForConfigOrDie(ts.config)
}

// restart stops the server and starts a new one on the same data dir and
// port, as an operator restarting the process would.
func (ts *testServer) restart(t testing.TB) {
	t.Helper()
	ts.Stop()
	ts.start(t)
}

func restConfig(t testing.TB, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	return cfg
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
