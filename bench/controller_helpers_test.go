package bench

import (
	"context"
	"net/http"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
)

// Helpers for the benchmarks that run a controller against an in-process
// API server (node IPAM, EndpointSlice).

// roundTripFunc is a func as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// observedConfig is a copy of cfg whose clients pass every request to
// observe before sending it (to count a controller's writes).
func observedConfig(cfg *rest.Config, observe func(*http.Request)) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			observe(req)
			return rt.RoundTrip(req)
		})
	}
	return cfg
}

// runController starts factory's informers and run in a goroutine, both
// under a child of ctx. stop cancels them, waits for run to return and
// shuts the informers down.
func runController(ctx context.Context, factory informers.SharedInformerFactory, run func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	return func() { cancel(); <-done; factory.Shutdown() }
}

// startInformers starts factory's informers under a child of ctx and waits
// for their caches to sync. stop cancels them and shuts them down
// (Shutdown waits for the informers, which stop only when their channel
// closes: cancel first).
func startInformers(ctx context.Context, factory informers.SharedInformerFactory) (stop func()) {
	watchCtx, cancel := context.WithCancel(ctx)
	factory.Start(watchCtx.Done())
	stop = func() { cancel(); factory.Shutdown() }
	factory.WaitForCacheSync(ctx.Done())
	return stop
}
