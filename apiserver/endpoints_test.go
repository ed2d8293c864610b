package apiserver_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEndpointsValidation: core/v1 Endpoints are checked as upstream checks
// them; a refused write changes nothing.
func TestEndpointsValidation(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	eps := ts.client.CoreV1().Endpoints("default")
	good := func() *corev1.Endpoints {
		return &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Subsets: []corev1.EndpointSubset{{
				Addresses:         []corev1.EndpointAddress{{IP: "10.244.1.5", Hostname: "web-0"}},
				NotReadyAddresses: []corev1.EndpointAddress{{IP: "fd00::6"}},
				Ports:             []corev1.EndpointPort{{Name: "http", Port: 8080}, {Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP}},
			}},
		}
	}
	rev := etcdRevision(t, ts)
	for name, tc := range map[string]struct {
		mutate func(*corev1.Endpoints)
		field  string
	}{
		"loopback ip":         {func(e *corev1.Endpoints) { e.Subsets[0].Addresses[0].IP = "127.0.0.1" }, "subsets[0].addresses[0].ip"},
		"link-local ip":       {func(e *corev1.Endpoints) { e.Subsets[0].NotReadyAddresses[0].IP = "fe80::1" }, "subsets[0].notReadyAddresses[0].ip"},
		"not an ip":           {func(e *corev1.Endpoints) { e.Subsets[0].Addresses[0].IP = "web.example" }, "subsets[0].addresses[0].ip"},
		"bad hostname":        {func(e *corev1.Endpoints) { e.Subsets[0].Addresses[0].Hostname = "Web_0" }, "subsets[0].addresses[0].hostname"},
		"unnamed second port": {func(e *corev1.Endpoints) { e.Subsets[0].Ports[1].Name = "" }, "subsets[0].ports[1].name"},
		"port zero":           {func(e *corev1.Endpoints) { e.Subsets[0].Ports[0].Port = 0 }, "subsets[0].ports[0].port"},
		"bad protocol":        {func(e *corev1.Endpoints) { e.Subsets[0].Ports[0].Protocol = "ICMP" }, "subsets[0].ports[0].protocol"},
		"empty subset":        {func(e *corev1.Endpoints) { e.Subsets[0].Addresses, e.Subsets[0].NotReadyAddresses = nil, nil }, "subsets[0]"},
		"bad name":            {func(e *corev1.Endpoints) { e.Name = "Web" }, "metadata.name"},
	} {
		e := good()
		tc.mutate(e)
		_, err := eps.Create(ctx, e, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{tc.field}) {
			t.Errorf("%s: %v (fields %v), want Invalid on %s", name, err, causeFields(err), tc.field)
		}
	}
	if got := etcdRevision(t, ts); got != rev {
		t.Errorf("refused creates wrote to etcd (revision %d -> %d)", rev, got)
	}

	created, err := eps.Create(ctx, good(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("valid Endpoints: %v", err)
	}
	if p := created.Subsets[0].Ports[0]; p.Protocol != corev1.ProtocolTCP {
		t.Errorf("port protocol %q, want TCP by default", p.Protocol)
	}
	bad := created.DeepCopy()
	bad.Subsets[0].Addresses[0].IP = "0.0.0.0"
	if _, err := eps.Update(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{"subsets[0].addresses[0].ip"}) {
		t.Errorf("update to an unspecified IP: %v, want Invalid on subsets[0].addresses[0].ip", err)
	}
	created.Labels = map[string]string{"team": "web"}
	if _, err := eps.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Errorf("label update: %v", err)
	}
}
