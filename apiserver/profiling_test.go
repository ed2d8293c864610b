package apiserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodenet/nodenet/apiserver"
)

// TestProfiling: /debug/pprof/ is served only with --profiling and only to
// system:masters; a node's credentials get 403, and without the flag the
// path does not exist.
func TestProfiling(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.csv")
	data := "admin-token-0123456789,admin,admin,\"system:masters\"\n" +
		"node-token-0123456789,system:node:n1,n1,\"system:nodes\"\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(ts *testServer, token, path string) (int, string) {
		t.Helper()
		cfg := rest.CopyConfig(ts.config)
		cfg.BearerToken, cfg.BearerTokenFile = token, ""
		cs := kubernetes.NewForConfigOrDie(cfg)
		var code int
		body, err := cs.Discovery().RESTClient().Get().AbsPath(path).Param("debug", "1").Do(ctxT(t)).StatusCode(&code).Raw()
		if err != nil && code == 0 {
			t.Fatalf("GET %s: %v", path, err)
		}
		return code, string(body)
	}

	on := startServer(t, func(c *apiserver.Config) { c.TokenAuthFile, c.Profiling = file, true })
	if code, body := get(on, "admin-token-0123456789", "/debug/pprof/goroutine"); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("admin's goroutine profile: %d %.200q", code, body)
	}
	if code, body := get(on, "admin-token-0123456789", "/debug/pprof/"); code != 200 || !strings.Contains(body, "heap") {
		t.Errorf("admin's profile index: %d %.200q", code, body)
	}
	if code, body := get(on, "node-token-0123456789", "/debug/pprof/goroutine"); code != 403 || strings.Contains(body, "goroutine profile:") {
		t.Errorf("a node's goroutine profile: %d %.200q, want 403", code, body)
	}

	off := startServer(t, func(c *apiserver.Config) { c.TokenAuthFile = file })
	if code, body := get(off, "admin-token-0123456789", "/debug/pprof/goroutine"); code != 404 {
		t.Errorf("without --profiling: %d %.200q, want 404", code, body)
	}
}
