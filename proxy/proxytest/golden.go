package proxytest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/proxy"
)

// GoldenServices covers every feature once. Each data plane's golden rules,
// tracer and kernel contract tests program these.
func GoldenServices(fam proxy.Family) []*proxy.ServicePort {
	a := func(v4, v6 string) string {
		if fam == proxy.IPv6 {
			return v6
		}
		return v4
	}
	return []*proxy.ServicePort{
		Port("default", "web", a("10.96.0.10", "fd00::10"), 80, proxy.TCP, WithEndpoints(8080, a("10.244.1.2", "fd10::1:2"), a("10.244.2.2", "fd10::2:2"))),
		Port("default", "dns", a("10.96.0.53", "fd00::53"), 53, proxy.UDP),
		Port("default", "np", a("10.96.0.20", "fd00::20"), 80, proxy.TCP, WithNodePort(30080), WithEndpoints(8080, a("10.244.1.3", "fd10::1:3"))),
		Port("default", "lb", a("10.96.0.30", "fd00::30"), 443, proxy.TCP, WithNodePort(30443), WithETPLocal,
			WithLB(a("192.0.2.10", "2001:db8::10"), a("203.0.113.0/24", "2001:db8:1::/48")),
			WithLocalEndpoints(8443, a("10.244.0.5", "fd10::5")), WithEndpoints(8443, a("10.244.3.5", "fd10::3:5"))),
		Port("default", "ext", a("10.96.0.40", "fd00::40"), 8080, proxy.TCP, WithExternalIPs(a("198.51.100.7", "2001:db8::7"))),
		Port("default", "sticky", a("10.96.0.50", "fd00::50"), 80, proxy.TCP, WithAffinity(3*time.Hour),
			WithEndpoints(80, a("10.244.1.9", "fd10::1:9"), a("10.244.2.9", "fd10::2:9"), a("10.244.3.9", "fd10::3:9"))),
		Port("default", "itp", a("10.96.0.60", "fd00::60"), 80, proxy.TCP, WithITPLocal,
			WithLocalEndpoints(80, a("10.244.0.6", "fd10::6")), WithEndpoints(80, a("10.244.4.6", "fd10::4:6"))),
		Port("default", "sctp", a("10.96.0.70", "fd00::70"), 9999, proxy.SCTP, WithEndpoints(9999, a("10.244.1.7", "fd10::1:7"))),
		Port("default", "local-none", a("10.96.0.80", "fd00::80"), 80, proxy.UDP, WithNodePort(30081), WithETPLocal,
			WithEndpoints(80, a("10.244.5.8", "fd10::5:8"))),
	}
}

// Golden compares got with the golden file at path; with update it first
// rewrites the file.
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("rules differ from %s (run with -update to accept):\n%s", path, got)
	}
}

// CheckGoldenRules syncs GoldenServices, once per family, into the data
// plane newPlane returns, and compares the rules dump returns with
// testdata/golden-<family><ext> (see Golden for update).
func CheckGoldenRules(t *testing.T, ext string, update bool, newPlane func(t *testing.T, fam proxy.Family) (dp proxy.DataPlane, dump func() string)) {
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			dp, dump := newPlane(t, fam)
			res, err := dp.Sync(context.Background(), Snapshot(fam, GoldenServices(fam)...), Full)
			if err != nil {
				t.Fatal(err)
			}
			if res.Written == 0 || res.Total < res.Written {
				t.Errorf("result %+v", res)
			}
			Golden(t, filepath.Join("testdata", "golden-"+strings.ToLower(fam.String())+ext), dump(), update)
		})
	}
}

// IntactDataPlane is a data plane that can tell whether what it programmed
// is still in place.
type IntactDataPlane interface {
	proxy.DataPlane
	Intact(ctx context.Context) (bool, error)
}

// CheckIntact checks that p notices damage done behind its back: it is
// intact before its first sync and after each full sync of
// GoldenServices(IPv4), and not intact after damage(each of damages).
func CheckIntact(t *testing.T, p IntactDataPlane, damages []string, damage func(ctx context.Context, what string) error) {
	t.Helper()
	ctx := context.Background()
	check := func(step string, want bool) {
		t.Helper()
		got, err := p.Intact(ctx)
		if err != nil || got != want {
			t.Fatalf("%s: Intact = %v, %v; want %v", step, got, err, want)
		}
	}
	check("before the first sync", true)
	for _, what := range damages {
		if _, err := p.Sync(ctx, Snapshot(proxy.IPv4, GoldenServices(proxy.IPv4)...), Full); err != nil {
			t.Fatal(err)
		}
		check("after a full sync", true)
		if err := damage(ctx, what); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		check("after "+what, false)
	}
}
