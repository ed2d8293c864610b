package apiserver_test

// Helpers shared by allocation_test.go, restart_test.go, compaction_test.go,
// badinput_test.go, auth_test.go and namespace_test.go.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	serviceIPClaims = "/registry/ranges/serviceips/"
	nodePortClaims  = "/registry/ranges/servicenodeports/"
)

// etcdKeys returns every key under prefix (with the prefix cut off) and its
// value, read straight from etcd.
func etcdKeys(t testing.TB, ts *testServer, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ts.EtcdClient().Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("etcd get %s: %v", prefix, err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = string(kv.Value)
	}
	return out
}

// etcdRevision is etcd's current revision: it moves with every write, so an
// unchanged revision proves a request wrote nothing.
func etcdRevision(t testing.TB, ts *testServer) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ts.EtcdClient().Get(ctx, "/registry/health-probe", clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("etcd revision: %v", err)
	}
	return resp.Header.Revision
}

func createNamespace(t testing.TB, ts *testServer, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := ts.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// statusOf returns the metav1.Status carried by an API error.
func statusOf(t testing.TB, err error) metav1.Status {
	t.Helper()
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not an API status error", err, err)
	}
	return se.Status()
}

// causeFields lists the field names of an error's causes.
func causeFields(err error) []string {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return nil
	}
	var out []string
	for _, c := range se.Status().Details.Causes {
		out = append(out, c.Field)
	}
	return out
}
