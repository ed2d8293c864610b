package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func TestExpandVarsLikeKubelet(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "x",
		"pre-$(A)-post":  "pre-x-post",
		"$(EMPTY)":       "",
		"$(UNKNOWN)":     "$(UNKNOWN)",
		"$$(A)":          "$(A)",
		"$$$(A)":         "$x",
		"$A":             "$A",
		"a$":             "a$",
		"$(A":            "$(A",
		"$()":            "$()",
		"$(A)$(A)":       "xx",
		"100$ and $(A)!": "100$ and x!",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContainerEnvDownwardAPIAndConfigMap(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"},
		Data: map[string]string{"mode": "nftables"}})
	a, _ := offlineAgent(t)
	a.o.Client = client
	w := newPodWorker(a, "uid-1")
	w.sb = &sandboxState{IPs: []string{"10.244.1.5"}}
	pod := testPod(corev1.RestartPolicyAlways, "c")
	pod.Labels = map[string]string{"app": "web"}
	pod.Spec.ServiceAccountName = "sa"
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c := corev1.Container{Name: "c", Env: []corev1.EnvVar{
		{Name: "N", ValueFrom: field("spec.nodeName")},
		{Name: "IP", ValueFrom: field("status.podIP")},
		{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
		{Name: "UID", ValueFrom: field("metadata.uid")},
		{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
		{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "mode"}}},
		{Name: "OPT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "absent", Optional: ptr.To(true)}}},
		{Name: "COMBINED", Value: "$(N)/$(MODE)/$(OPT)"},
	}}
	env, _, err := w.containerEnv(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"N=node-a", "IP=10.244.1.5", "HOST_IP=172.30.0.11", "UID=uid-1", "SA=sa", "APP=web",
		"MODE=nftables", "COMBINED=node-a/nftables/$(OPT)", "POD_NAME=p", "HOSTNAME=p"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	if slices.ContainsFunc(env, func(e string) bool { return len(e) > 4 && e[:4] == "OPT=" }) {
		t.Errorf("optional missing key set: %v", env)
	}
	// A missing required key waits (retried), it does not fail the pod.
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "absent"}}}}
	_, _, err = w.containerEnv(context.Background(), pod, c)
	var ce *envConfigError
	if !errors.As(err, &ce) {
		t.Errorf("missing key: %v, want an envConfigError", err)
	}
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: field("spec.nope")}}
	_, _, err = w.containerEnv(context.Background(), pod, c)
	var pe *podError
	if !errors.As(err, &pe) {
		t.Errorf("unsupported fieldRef: %v, want a podError", err)
	}
}

func TestServiceAccountCredentialsAndAPIServerEnv(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Port: 443}}}}
	a, _ := offlineAgent(t)
	a.o.APIServerCA = []byte("ca")
	client := fake.NewClientset(svc)
	// Account "nodenet" gets a token; any other is a 404, as a missing
	// account or an API server without TokenRequest answers.
	var asked *authenticationv1.TokenRequest
	client.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(k8stesting.CreateActionImpl)
		if !ok || action.GetSubresource() != "token" {
			return false, nil, nil
		}
		if ca.Name != "nodenet" {
			return true, nil, apierrors.NewNotFound(corev1.Resource("serviceaccounts"), ca.Name)
		}
		asked = ca.Object.(*authenticationv1.TokenRequest)
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "tok",
			ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}}, nil
	})
	a.o.Client = client
	w := newPodWorker(a, "uid-1")
	w.sb = &sandboxState{IPs: []string{"10.244.1.5"}}
	pod := testPod(corev1.RestartPolicyAlways, "c")
	pod.Spec.ServiceAccountName = "nodenet"
	ctx := context.Background()

	m, err := w.serviceAccountMount(ctx, pod, pod.Spec.Containers[0])
	if err != nil || m == nil || m.Target != saMountPath || !m.ReadOnly {
		t.Fatalf("mount %+v, %v", m, err)
	}
	if ref := asked.Spec.BoundObjectRef; ref == nil || ref.Kind != "Pod" || ref.Name != pod.Name || ref.UID != pod.UID {
		t.Errorf("token request not bound to the pod: %+v", asked.Spec)
	}
	for name, want := range map[string]string{"token": "tok", "ca.crt": "ca", "namespace": "ns"} {
		if b, err := os.ReadFile(filepath.Join(m.Source, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	if m, err := w.serviceAccountMount(ctx, pod, pod.Spec.Containers[0]); m != nil || err != nil {
		t.Errorf("automount false: %+v, %v", m, err)
	}
	pod.Spec.AutomountServiceAccountToken, pod.Spec.ServiceAccountName = nil, "other"
	if m, err := newPodWorker(a, "uid-2").serviceAccountMount(ctx, pod, pod.Spec.Containers[0]); m != nil || err != nil {
		t.Errorf("token request answered 404: %+v, %v", m, err)
	}

	env, _, err := w.containerEnv(ctx, pod, pod.Spec.Containers[0])
	if err != nil || !slices.Contains(env, "KUBERNETES_SERVICE_HOST=10.96.0.1") || !slices.Contains(env, "KUBERNETES_SERVICE_PORT=443") {
		t.Errorf("env from the kubernetes Service: %v, %v", env, err)
	}
	a.o.APIServer = "127.0.0.1:6443"
	env, _, err = w.containerEnv(ctx, pod, pod.Spec.Containers[0])
	if err != nil || !slices.Contains(env, "KUBERNETES_SERVICE_HOST=127.0.0.1") || !slices.Contains(env, "KUBERNETES_SERVICE_PORT=6443") {
		t.Errorf("env from --pod-api-server: %v, %v", env, err)
	}
}
