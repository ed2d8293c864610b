package apiserver_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/kubectltest"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/version"
)

// TestKubectlEveryVersionSmoke runs every kubectl.1.NN on the image (not
// only the oldest and newest that TestKubectl exercises in depth) through a
// few everyday commands, so the client range the README states is tested.
func TestKubectlEveryVersionSmoke(t *testing.T) {
	nettest.SkipShort(t, "runs every kubectl version")
	kubectlBinaries(t)        // the versions TestKubectl needs are among them
	all := kubectltest.All(t) // skips, or fails in CI, without the clients
	versions := slices.Sorted(maps.Keys(all))
	ts := startServer(t)
	for _, minor := range versions {
		bin := all[minor]
		t.Run("v"+minor, func(t *testing.T) {
			k := newKubectl(t, bin, ts.KubeconfigPath())
			var v struct {
				ClientVersion struct{ Major, Minor string } `json:"clientVersion"`
				ServerVersion struct{ GitVersion string }   `json:"serverVersion"`
			}
			out, errOut, err := k.run(t, "version", "-o", "json")
			if err != nil {
				t.Fatalf("kubectl version: %v\n%s%s", err, out, errOut)
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("kubectl version -o json: %v\n%s", err, out)
			}
			if got := v.ClientVersion.Major + "." + strings.TrimSuffix(v.ClientVersion.Minor, "+"); got != minor {
				t.Errorf("%s reports client %s", bin, got)
			}
			if v.ServerVersion.GitVersion != version.GitVersion {
				t.Errorf("server version %q, want %q", v.ServerVersion.GitVersion, version.GitVersion)
			}
			t.Logf("kubectl %s version stderr: %q", minor, strings.TrimSpace(errOut))
			wantContains(t, "kubectl api-resources", k.ok(t, "api-resources"), "endpointslices", "events.k8s.io/v1", "leases")
			wantContains(t, "kubectl get svc", k.ok(t, "get", "svc", "-n", "default"), "kubernetes", "10.96.0.1")
			wantContains(t, "kubectl get ns", k.ok(t, "get", "ns"), "kube-system")
			k.ok(t, "get", "events", "-A")
		})
	}
}
