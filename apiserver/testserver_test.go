package apiserver_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/testapi"
)

// testServer runs a real API server with embedded etcd in a temp dir.
type testServer struct {
	*apiserver.Server
	dir    string
	cfg    apiserver.Config
	config *rest.Config
	client kubernetes.Interface
}

// startServer starts a server; mutate may change the config first.
func startServer(t testing.TB, mutate ...func(*apiserver.Config)) *testServer {
	t.Helper()
	cfg := apiserver.Config{
		DataDir:    t.TempDir(),
		SecurePort: 0,
		Logger:     testapi.Logger(),
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
	ts.config = testapi.RestConfig(t, srv.KubeconfigPath())
	ts.client = kubernetes.NewForConfigOrDie(ts.config)
}

// restart stops the server and starts a new one on the same data dir and
// port, as an operator restarting the process would.
func (ts *testServer) restart(t testing.TB) {
	t.Helper()
	ts.Stop()
	ts.start(t)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
