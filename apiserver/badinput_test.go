package apiserver_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBadInputIsRefusedAndWritesNothing sends invalid requests; each must
// fail with the right code (422s name the field in their causes) and leave
// etcd untouched: its revision does not move and the object is not there.
func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	const ns = "bad"
	createNamespace(t, ts, ns)
	existing, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "existing"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := existing.DeepCopy()
	existing.Data["v"] = "2"
	if existing, err = c.CoreV1().ConfigMaps(ns).Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	svc := func(mut func(*corev1.Service)) func() error {
		return func() error {
			s := clusterIPService("bad-svc")
			mut(s)
			_, err := c.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
			return err
		}
	}
	node := func(cidr string) func() error {
		return func() error {
			_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bad-node"}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}, metav1.CreateOptions{})
			return err
		}
	}
	slice := func(addrType discoveryv1.AddressType, addr string) func() error {
		return func() error {
			_, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: "bad-slice"},
				AddressType: addrType,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
			}, metav1.CreateOptions{})
			return err
		}
	}
	cm := func(name string) func() error {
		return func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		}
	}
	raw := func(resource, params, body string) func() error {
		return func() error {
			req := c.CoreV1().RESTClient().Post().Namespace(ns).Resource(resource).
				SetHeader("Content-Type", "application/json").Body([]byte(body))
			if params != "" {
				k, v, _ := strings.Cut(params, "=")
				req = req.Param(k, v)
			}
			return req.Do(ctx).Error()
		}
	}
	// absent reports whether the object a case tried to write is missing.
	absent := func(get func() error) func() bool {
		return func() bool { return apierrors.IsNotFound(get()) }
	}
	cmAbsent := func(name string) func() bool {
		return absent(func() error { _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); return err })
	}
	svcAbsent := func(name string) func() bool {
		return absent(func() error { _, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); return err })
	}
	nodeAbsent := absent(func() error { _, err := c.CoreV1().Nodes().Get(ctx, "bad-node", metav1.GetOptions{}); return err })
	sliceAbsent := absent(func() error {
		_, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "bad-slice", metav1.GetOptions{})
		return err
	})
	podAbsent := absent(func() error { _, err := c.CoreV1().Pods(ns).Get(ctx, "bad-pod", metav1.GetOptions{}); return err })
	long := strings.Repeat("a", 254)

	cases := []struct {
		name   string
		do     func() error
		code   int32
		field  string // for 422: a cause must name it
		absent func() bool
	}{
		{"uppercase name", cm("Bad-Name"), 422, "metadata.name", cmAbsent("Bad-Name")},
		{"name too long", cm(long), 422, "metadata.name", cmAbsent(long)},
		{"service name too long for a DNS label", func() error {
			_, err := c.CoreV1().Services(ns).Create(ctx, clusterIPService("s"+strings.Repeat("a", 63)), metav1.CreateOptions{})
			return err
		}, 422, "metadata.name", svcAbsent("s" + strings.Repeat("a", 63))},
		{"node podCIDR /33", node("10.244.1.0/33"), 422, "spec.podCIDR", nodeAbsent},
		{"node podCIDR banana", node("banana"), 422, "spec.podCIDR", nodeAbsent},
		{"service bad type", svc(func(s *corev1.Service) { s.Spec.Type = "Bogus" }), 422, "spec.type", svcAbsent("bad-svc")},
		{"service duplicate ports", svc(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 80}, {Name: "b", Port: 80}}
		}), 422, "spec.ports[1]", svcAbsent("bad-svc")},
		{"service port 0", svc(func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 }), 422, "spec.ports[0].port", svcAbsent("bad-svc")},
		{"service port 70000", svc(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }), 422, "spec.ports[0].port", svcAbsent("bad-svc")},
		{"clusterIP 300.1.1.1", svc(func(s *corev1.Service) { s.Spec.ClusterIP = "300.1.1.1" }), 422, "spec.clusterIP", svcAbsent("bad-svc")},
		{"clusterIP out of range", svc(func(s *corev1.Service) { s.Spec.ClusterIP = "10.200.0.5" }), 422, "spec.clusterIPs[0]", svcAbsent("bad-svc")},
		{"externalTrafficPolicy on ClusterIP", svc(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), 422, "spec.externalTrafficPolicy", svcAbsent("bad-svc")},
		{"endpointslice bad addressType", slice("IPv5", "10.244.1.5"), 422, "addressType", sliceAbsent},
		{"endpointslice bad address", slice(discoveryv1.AddressTypeIPv4, "banana"), 422, "endpoints[0].addresses[0]", sliceAbsent},
		{"endpointslice IPv6 address in IPv4 slice", slice(discoveryv1.AddressTypeIPv4, "fd00::5"), 422, "endpoints[0].addresses[0]", sliceAbsent},
		{"pod without containers", func() error {
			_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad-pod"}}, metav1.CreateOptions{})
			return err
		}, 422, "spec.containers", podAbsent},
		{"malformed JSON", raw("configmaps", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"broken"`), 400, "", cmAbsent("broken")},
		{"wrong kind in body", raw("configmaps", "", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a-pod"},"spec":{"containers":[{"name":"c","image":"x"}]}}`), 400, "", cmAbsent("a-pod")},
		{"unknown field with fieldValidation=Strict", raw("configmaps", "fieldValidation=Strict", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"strict"},"bogus":1}`), 400, "", cmAbsent("strict")},
		{"get missing", func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "missing", metav1.GetOptions{})
			return err
		}, 404, "", cmAbsent("missing")},
		{"update with a stale resourceVersion", func() error {
			s := stale.DeepCopy()
			s.Data["v"] = "stale"
			_, err := c.CoreV1().ConfigMaps(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}, 409, "", func() bool {
			cur, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "existing", metav1.GetOptions{})
			return err == nil && cur.Data["v"] == "2" && cur.ResourceVersion == existing.ResourceVersion
		}},
		{"create in a missing namespace", func() error {
			_, err := c.CoreV1().ConfigMaps("no-such-ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}}, metav1.CreateOptions{})
			return err
		}, 404, "", absent(func() error {
			_, err := c.CoreV1().ConfigMaps("no-such-ns").Get(ctx, "orphan", metav1.GetOptions{})
			return err
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rev := etcdRevision(t, ts)
			err := tc.do()
			if err == nil {
				t.Fatalf("accepted, want %d", tc.code)
			}
			st := statusOf(t, err)
			t.Logf("%d %s: %s", st.Code, st.Reason, st.Message)
			if st.Code != tc.code {
				t.Fatalf("code %d (%s: %s), want %d", st.Code, st.Reason, st.Message, tc.code)
			}
			if tc.code == http.StatusUnprocessableEntity {
				if !apierrors.IsInvalid(err) {
					t.Errorf("reason %s, want Invalid", st.Reason)
				}
				if st.Details == nil || len(st.Details.Causes) == 0 {
					t.Fatalf("422 without causes: %+v", st)
				}
				if f := causeFields(err); !containsPrefix(f, tc.field) {
					t.Errorf("causes name %v, want %s (%s)", f, tc.field, st.Message)
				}
			}
			if got := etcdRevision(t, ts); got != rev {
				t.Errorf("a refused request wrote to etcd: revision %d -> %d", rev, got)
			}
			if !tc.absent() {
				t.Errorf("the refused object is stored")
			}
		})
	}

	t.Run("create in a terminating namespace", func(t *testing.T) {
		createNamespace(t, ts, "dying")
		held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := c.CoreV1().Pods("dying").Create(ctx, held, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().Namespaces().Delete(ctx, "dying", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The namespace controller marks the held pod terminating and waits.
		waitFor(t, 10*time.Second, "the held pod to be terminating", func() bool {
			p, err := c.CoreV1().Pods("dying").Get(ctx, "held", metav1.GetOptions{})
			return err == nil && p.DeletionTimestamp != nil
		})
		nsObj, err := c.CoreV1().Namespaces().Get(ctx, "dying", metav1.GetOptions{})
		if err != nil || nsObj.DeletionTimestamp == nil || nsObj.Status.Phase != corev1.NamespaceTerminating {
			t.Fatalf("namespace held by a finalizer: %v %+v", err, nsObj)
		}
		rev := etcdRevision(t, ts)
		_, err = c.CoreV1().ConfigMaps("dying").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || statusOf(t, err).Code != http.StatusForbidden {
			t.Fatalf("create in a terminating namespace: got %v, want 403", err)
		}
		if got := etcdRevision(t, ts); got != rev {
			t.Errorf("refused create wrote to etcd: revision %d -> %d", rev, got)
		}
		if _, err := c.CoreV1().ConfigMaps("dying").Get(ctx, "late", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("late configmap: %v", err)
		}
	})
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
