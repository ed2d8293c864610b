package apiserver_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestAdvertiseAddressRefusedUpFront: an address that cannot be the
// "kubernetes" Service's endpoint is refused before anything starts, with
// the flag to set; nothing is written to the data dir.
func TestAdvertiseAddressRefusedUpFront(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bind, adv  string
		wantSubstr []string
	}{
		{"link-local bind", "169.254.10.1", "", []string{"--bind-address 169.254.10.1 is link-local", "set --advertise-address"}},
		{"link-local IPv6 bind", "fe80::1", "", []string{"--bind-address fe80::1 is link-local", "set --advertise-address"}},
		{"link-local advertise", "127.0.0.1", "169.254.0.5", []string{"--advertise-address 169.254.0.5 is link-local", "set --advertise-address"}},
		{"unspecified advertise", "127.0.0.1", "0.0.0.0", []string{"--advertise-address 0.0.0.0 is unspecified"}},
		{"multicast advertise", "127.0.0.1", "239.1.1.1", []string{"--advertise-address 239.1.1.1 is a multicast address"}},
		{"not an IP", "127.0.0.1", "api.example", []string{`--advertise-address "api.example" is not an IP address`}},
		{"bind not an IP", "localhost", "", []string{`--bind-address "localhost" is not an IP address`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			srv, err := apiserver.Start(ctx, apiserver.Config{DataDir: dir, BindAddress: tc.bind, AdvertiseAddress: tc.adv, Logger: testapi.Logger()})
			if err == nil {
				srv.Stop()
				t.Fatalf("started with bind %q advertise %q", tc.bind, tc.adv)
			}
			for _, want := range tc.wantSubstr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
				t.Errorf("data dir created before the address check: %v", statErr)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refusal took %v: something started first", d)
			}
		})
	}
}

// TestAdvertiseAddressFromListener: with a listener (nodenet up opens one
// inside the vpc namespace) the listener's address is advertised, not
// --bind-address; a loopback one gives the "kubernetes" Service no endpoints.
// (TestBootstrapObjects covers an explicit --advertise-address.)
func TestAdvertiseAddressFromListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *apiserver.Config) { c.Listener = ln; c.BindAddress = "169.254.10.1" })
	ctx := ctxT(t)
	if _, err := ts.client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("loopback listener: get the kubernetes EndpointSlice: %v, want NotFound", err)
	}
}
