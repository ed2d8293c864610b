package testapi

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/apiserver"
)

// Server is a running API server plus an admin client.
type Server struct {
	*apiserver.Server
	Config *rest.Config
	Client kubernetes.Interface
}

// Logger returns a test logger: silent unless NODENET_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("NODENET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Start runs an API server for the test; mutate may adjust its config.
func Start(t testing.TB, mutate ...func(*apiserver.Config)) *Server {
	t.Helper()
	cfg := apiserver.Config{DataDir: t.TempDir(), Logger: Logger()}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := apiserver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start API server: %v", err)
	}
	t.Cleanup(srv.Stop)
	rc := RestConfig(t, srv.KubeconfigPath())
	return &Server{Server: srv, Config: rc, Client: kubernetes.NewForConfigOrDie(rc)}
}

// RestConfig loads a kubeconfig for a test client, without client-side
// rate limits.
func RestConfig(t testing.TB, kubeconfig string) *rest.Config {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	rc.QPS, rc.Burst = -1, 0
	return rc
}

// Context returns a context cancelled at the end of the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 20 ms until it holds or d passes.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
