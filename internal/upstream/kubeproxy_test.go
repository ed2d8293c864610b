package upstream

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestBuildUpstream builds every upstream binary the interoperability tests
// use into the cache, when asked (NODENET_UPSTREAM_BUILD=1, what
// `make upstream` sets); otherwise it skips like the helpers do.
func TestBuildUpstream(t *testing.T) {
	if os.Getenv(EnvBuild) != "1" {
		t.Skipf("set %s=1 to build the upstream binaries (%s)", EnvBuild, BuildCommand)
	}
	t.Logf("flanneld: %s", Flanneld(t))
	t.Logf("kube-proxy: %s", KubeProxy(t))
}

// TestKubeProxyMissingSkips: with nothing cached and no build asked for,
// the helper skips (naming the build command) instead of starting a build
// of tens of minutes.
func TestKubeProxyMissingSkips(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(EnvBuild, "")
	var skipped bool
	t.Run("helper", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		KubeProxy(t)
	})
	if !skipped {
		t.Fatal("KubeProxy built or failed with no cached binary and no build asked for")
	}
}

func TestStagingModules(t *testing.T) {
	gomod := `module k8s.io/kubernetes

require (
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd
	k8s.io/klog/v2 v2.130.1
)

require k8s.io/kube-proxy v0.0.0

replace (
	k8s.io/api => ./staging/src/k8s.io/api
)
`
	got, err := stagingModules(strings.NewReader(gomod))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kube-proxy"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
