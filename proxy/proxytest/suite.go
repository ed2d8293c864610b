package proxytest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/proxy"
)

const wait = 10 * time.Second

func vip(svc *v1.Service) string {
	return net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
}

// backends connects n times and returns who answered.
func backends(e *Env, addr string, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		r, err := DialTCP(e.Client, addr, time.Second)
		if err != nil {
			return seen, err
		}
		seen[r.Backend]++
	}
	return seen, nil
}

// KernelSuite runs every data-plane requirement against the real kernel.
// It needs root (nettest gates it).
func KernelSuite(t *testing.T, newDP NewDataPlane) {
	e := NewEnv(t, newDP)
	p := e.StartProxy(t)
	ctx := context.Background()

	t.Run("ClusterIPReachesBothEndpoints", func(t *testing.T) {
		svc := e.CreateService(t, Service("web", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
		Eventually(t, wait, "both endpoints behind "+vip(svc), func() error {
			seen, err := backends(e, vip(svc), 20)
			if err != nil {
				return err
			}
			if seen["pod1"] == 0 || seen["pod2"] == 0 {
				return fmt.Errorf("answers %v", seen)
			}
			return nil
		})
	})

	t.Run("NodePortFromAnotherNamespace", func(t *testing.T) {
		s := Service("np", v1.ProtocolTCP, TCPPort)
		s.Spec.Type = v1.ServiceTypeNodePort
		svc := e.CreateService(t, s)
		e.SetEndpoints(t, svc, TCPPort, Pod2)
		addr := net.JoinHostPort(NodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort))
		Eventually(t, wait, "NodePort "+addr, func() error {
			r, err := DialTCP(e.Client, addr, time.Second)
			if err == nil && r.Backend != "pod2" {
				err = fmt.Errorf("answered by %s", r.Backend)
			}
			return err
		})
	})

	t.Run("NoEndpointsIsRefusedImmediately", func(t *testing.T) {
		svc := e.CreateService(t, Service("empty", v1.ProtocolTCP, TCPPort))
		Eventually(t, wait, "connection refused at "+vip(svc), func() error {
			start := time.Now()
			_, err := DialTCP(e.Client, vip(svc), 3*time.Second)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("dial: %v", err)
			}
			if d := time.Since(start); d > time.Second {
				return fmt.Errorf("refusal took %v", d)
			}
			return nil
		})
		// Endpoints appearing later make it work.
		e.SetEndpoints(t, svc, TCPPort, Pod1)
		Eventually(t, wait, "service with new endpoints", func() error {
			_, err := DialTCP(e.Client, vip(svc), time.Second)
			return err
		})
	})

	t.Run("SessionAffinitySticks", func(t *testing.T) {
		s := Service("sticky", v1.ProtocolTCP, TCPPort)
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		timeout := int32(60)
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
		svc := e.CreateService(t, s)
		e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
		Eventually(t, wait, "sticky service", func() error {
			seen, err := backends(e, vip(svc), 20)
			if err != nil {
				return err
			}
			if len(seen) != 1 {
				return fmt.Errorf("answers spread over %v", seen)
			}
			return nil
		})
	})

	t.Run("ExternalTrafficPolicyLocal", func(t *testing.T) {
		s := Service("local", v1.ProtocolTCP, TCPPort)
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		svc := e.CreateService(t, s)
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: LBIP}}
		svc, err := e.Kube.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("set LB ingress: %v", err)
		}
		if svc.Spec.HealthCheckNodePort == 0 {
			t.Fatal("API server allocated no healthCheckNodePort")
		}
		hc := net.JoinHostPort(NodeIP, fmt.Sprint(svc.Spec.HealthCheckNodePort))
		Eventually(t, wait, "health check 503 without local endpoints", func() error {
			code, _, err := httpGet(e, hc)
			if err == nil && code != http.StatusServiceUnavailable {
				err = fmt.Errorf("status %d", code)
			}
			return err
		})
		e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
		for _, addr := range []string{
			net.JoinHostPort(NodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort)),
			net.JoinHostPort(LBIP, fmt.Sprint(svc.Spec.Ports[0].Port)),
		} {
			Eventually(t, wait, "eTP Local at "+addr, func() error {
				for range 10 {
					r, err := DialTCP(e.Client, addr, time.Second)
					if err != nil {
						return err
					}
					if r.Backend != "pod1" {
						return fmt.Errorf("answered by remote %s", r.Backend)
					}
					if host, _, _ := net.SplitHostPort(r.Peer); host != ClientIP {
						return fmt.Errorf("backend saw %s, not the client %s", r.Peer, ClientIP)
					}
				}
				return nil
			})
		}
		Eventually(t, wait, "health check 200 with 1 local endpoint", func() error {
			code, body, err := httpGet(e, hc)
			if err != nil {
				return err
			}
			var v struct{ LocalEndpoints int }
			_ = json.Unmarshal(body, &v)
			if code != http.StatusOK || v.LocalEndpoints != 1 {
				return fmt.Errorf("status %d body %s", code, body)
			}
			return nil
		})
	})

	t.Run("RemovedUDPEndpointGetsNoMoreDatagrams", func(t *testing.T) {
		svc := e.CreateService(t, Service("dns", v1.ProtocolUDP, UDPPort))
		e.SetEndpoints(t, svc, UDPPort, Pod1, Pod2)
		var c net.Conn
		var first Reply
		Eventually(t, wait, "UDP service answers", func() error {
			var err error
			if c != nil {
				c.Close()
			}
			if c, err = DialUDP(e.Client, vip(svc)); err != nil {
				return err
			}
			first, err = AskUDP(c, 300*time.Millisecond)
			return err
		})
		defer c.Close()
		// Same 5-tuple: conntrack pins it to the first backend.
		for range 5 {
			r, err := AskUDP(c, time.Second)
			if err != nil || r.Backend != first.Backend {
				t.Fatalf("before removal: %v %v (first %s)", r, err, first.Backend)
			}
		}
		keep := Pod1
		if first.Backend == "pod1" {
			keep = Pod2
		}
		e.SetEndpoints(t, svc, UDPPort, keep)
		Eventually(t, wait, "datagrams move off the removed endpoint", func() error {
			r, err := AskUDP(c, 300*time.Millisecond)
			if err != nil {
				return err
			}
			if r.Backend == first.Backend {
				return fmt.Errorf("still answered by removed %s", r.Backend)
			}
			return nil
		})
	})

	t.Run("Hairpin", func(t *testing.T) {
		svc := e.CreateService(t, Service("hairpin", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, svc, TCPPort, Pod1)
		Eventually(t, wait, "pod1 reaching itself through its service", func() error {
			r, err := DialTCP(e.Pod1, vip(svc), time.Second)
			if err == nil && r.Backend != "pod1" {
				err = fmt.Errorf("answered by %s", r.Backend)
			}
			return err
		})
	})

	t.Run("BadInputIsSkipped", func(t *testing.T) {
		bad := e.CreateService(t, Service("bad", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, bad, 0, Pod1) // port 0: accepted by the API, not programmable
		good := e.CreateService(t, Service("good", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, good, TCPPort, Pod2)
		Eventually(t, wait, "good service next to a bad one", func() error {
			_, err := DialTCP(e.Client, vip(good), time.Second)
			return err
		})
		if n := counterValue(t, p, "nodenet_proxy_invalid_input_total"); n < 1 {
			t.Errorf("invalid input metric = %v", n)
		}
		if _, err := DialTCP(e.Client, vip(bad), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("bad service (no usable endpoints) dial: %v, want refused", err)
		}
	})

	t.Run("RestartKeepsTraffic", func(t *testing.T) {
		svc := e.CreateService(t, Service("restart", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
		var conn net.Conn
		Eventually(t, wait, "connection before restart", func() error {
			return e.Client.Do(func() error {
				var err error
				conn, err = net.DialTimeout("tcp", vip(svc), time.Second)
				return err
			})
		})
		defer conn.Close()
		if _, err := readGreeting(conn, time.Second); err != nil {
			t.Fatal(err)
		}
		e.StopProxy()
		// Rules stay while no proxy runs.
		if _, err := DialTCP(e.Client, vip(svc), time.Second); err != nil {
			t.Fatalf("service down while the proxy is stopped: %v", err)
		}
		p = e.StartProxy(t)
		Eventually(t, wait, "first sync after restart", func() error {
			if p.Snapshot(proxy.IPv4) == nil {
				return errNotYet
			}
			return nil
		})
		// The established connection survived the restart's full sync.
		if _, err := conn.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Read(buf); err != nil || string(buf) != "ping\n" {
			t.Fatalf("established connection after restart: %q %v", buf, err)
		}
		if _, err := DialTCP(e.Client, vip(svc), time.Second); err != nil {
			t.Fatalf("new connection after restart: %v", err)
		}
	})

	t.Run("Metrics", func(t *testing.T) {
		mfs, err := p.Metrics().Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, mf := range mfs {
			have[mf.GetName()] = true
		}
		for _, n := range []string{"nodenet_proxy_sync_duration_seconds", "nodenet_proxy_network_programming_duration_seconds",
			"nodenet_proxy_rules_programmed", "nodenet_proxy_pending_changes", "nodenet_proxy_last_sync_timestamp_seconds"} {
			if !have[n] {
				t.Errorf("metric %s missing", n)
			}
		}
	})
}

// httpGet does a plain HTTP GET from the client namespace (the socket is
// created inside it; net/http would dial from another goroutine).
func httpGet(e *Env, hostport string) (int, []byte, error) {
	var c net.Conn
	if err := e.Client.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", hostport, time.Second)
		return err
	}); err != nil {
		return 0, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n", hostport); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func counterValue(t testing.TB, p *proxy.Proxy, name string) float64 {
	t.Helper()
	mfs, err := p.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += metricNumber(m)
		}
	}
	return sum
}

func metricNumber(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}
