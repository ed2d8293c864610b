package apiserver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/internal/periodic"
)

// systemNamespaces exist from the first start, as in every cluster.
var systemNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// bootstrap creates the system namespaces and the "kubernetes" Service with
// an EndpointSlice pointing at this server; both are converged on every
// start, so a changed advertise address is picked up.
func (s *Server) bootstrap(ctx context.Context) error {
	for _, name := range systemNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		req := &apiRequest{res: s.nsRes, name: name}
		if _, err := s.createObject(ctx, req, ns, false); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", name, err)
		}
	}
	if err := s.convergeServiceCIDR(ctx); err != nil {
		return err
	}
	if err := s.repairIPAddresses(ctx); err != nil {
		return err
	}
	host, portStr, _ := net.SplitHostPort(s.advertise)
	port, _ := strconv.Atoi(portStr)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: s.services.ranges[s.services.primary].At(1).String(),
			Ports:     []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(port))}},
		},
	}
	svcReq := &apiRequest{res: s.svcRes, namespace: "default", name: "kubernetes"}
	if _, err := s.createObject(ctx, svcReq, svc, false); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kubernetes service: %w", err)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() {
		// Pods cannot reach a loopback address, and EndpointSlices may not
		// hold one: the Service exists, its endpoints come with
		// --advertise-address.
		s.log.Info("no endpoints for the kubernetes service: advertise address is loopback", "address", host)
		return nil
	}
	addrType := discoveryv1.AddressTypeIPv4
	if ip.To4() == nil {
		addrType = discoveryv1.AddressTypeIPv6
	}
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "nodenet-apiserver"}},
		AddressType: addrType,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("https"), Port: ptr(int32(port)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	sliceRes := s.byGV[discoveryV1]["endpointslices"]
	sliceReq := &apiRequest{res: sliceRes, namespace: "default", name: "kubernetes"}
	_, err := s.createObject(ctx, sliceReq, slice.DeepCopy(), false)
	if apierrors.IsAlreadyExists(err) {
		_, _, err = s.updateObject(ctx, sliceReq, "", false, func(cur runtime.Object) (runtime.Object, error) {
			c := cur.(*discoveryv1.EndpointSlice)
			c.AddressType, c.Endpoints, c.Ports = slice.AddressType, slice.Endpoints, slice.Ports
			return c, nil
		})
	}
	if err != nil {
		return fmt.Errorf("converge the kubernetes endpointslice: %w", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// compactLoop compacts etcd history older than one interval, as
// kube-apiserver does, so the database does not grow without bound.
func (s *Server) compactLoop(ctx context.Context) {
	var last int64
	periodic.Every(ctx, s.cfg.CompactionInterval, func(ctx context.Context) {
		if last > 0 {
			if err := s.Compact(ctx, last); err != nil {
				s.log.Warn("etcd compaction failed", "rev", last, "err", err)
			}
		}
		rev, err := storage.CurrentRevision(ctx, s.client)
		if err == nil {
			last = rev
		}
	})
}

// Compact discards etcd history before rev. Watches and exact reads older
// than rev then get 410 Gone.
func (s *Server) Compact(ctx context.Context, rev int64) error {
	if _, err := s.client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("compact etcd at %d: %w", rev, err)
	}
	s.log.Info("compacted etcd", "rev", rev)
	return nil
}

// bookmarkLoop makes caches send bookmarks, so that watchers of quiet
// resources learn a fresh resourceVersion to resume from.
func (s *Server) bookmarkLoop(ctx context.Context) {
	periodic.Every(ctx, s.cfg.BookmarkInterval, func(ctx context.Context) {
		for _, r := range s.resources {
			if r.storedAs == nil {
				r.cache.RequestBookmarks(ctx)
			}
		}
	})
}

// reloadAllocations refreshes the allocator's hints from etcd; they drift
// when another API server shares the etcd, or after failed creates.
func (s *Server) reloadAllocations(ctx context.Context) {
	periodic.Every(ctx, time.Minute, func(ctx context.Context) {
		if err := s.services.load(ctx, s.client); err != nil {
			s.log.Warn("reload service allocations", "err", err)
		}
		if err := s.repairIPAddresses(ctx); err != nil {
			s.log.Warn("repair IPAddresses", "err", err)
		}
	})
}

// loopbackURLs picks two free loopback ports for embedded etcd.
func loopbackURLs() ([]url.URL, []url.URL, error) {
	var urls [2]url.URL
	for i := range urls {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("find a free port for etcd: %w", err)
		}
		urls[i] = url.URL{Scheme: "http", Host: ln.Addr().String()}
		ln.Close()
	}
	return urls[:1], urls[1:], nil
}
