package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What a pod needs for client-go's in-cluster config, which the node
// daemons of the DaemonSet use: KUBERNETES_SERVICE_HOST/PORT and the
// service account's token, CA and namespace at saMountPath.
//
// The API server has no TokenRequest, so the token comes from the
// service account's legacy token Secret (type
// kubernetes.io/service-account-token, annotated with the account's name);
// without one nothing is mounted, as for the pods that never talk to the
// API. The address is Options.APIServer when set (the local cluster: its
// pods reach the API server directly, not through the kubernetes
// Service's ClusterIP that the proxy in that very pod programs), else the
// kubernetes Service's, as the kubelet sets it.
const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// apiServerEnv is KUBERNETES_SERVICE_HOST and _PORT, or nil when unknown.
func (w *podWorker) apiServerEnv(ctx context.Context) (map[string]string, error) {
	host, port := "", ""
	if a := w.a.o.APIServer; a != "" {
		var err error
		if host, port, err = net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("API server address %q: %w", a, err)
		}
	} else {
		svc, err := w.a.o.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil || len(svc.Spec.Ports) == 0 || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return nil, nil //nolint:nilerr // no Service: the pod gets no address, as with the kubelet
		}
		host, port = svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))
	}
	return map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
		"KUBERNETES_SERVICE_PORT_HTTPS": port}, nil
}

// serviceAccountMount writes the pod's service account credentials into
// its volume directory and returns their mount, or nil when the pod opts
// out or the account has no token Secret.
func (w *podWorker) serviceAccountMount(ctx context.Context, pod *corev1.Pod, c corev1.Container) (*Mount, error) {
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		return nil, nil
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == saMountPath {
			return nil, nil // the pod brings its own
		}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	secrets, err := w.a.o.Client.CoreV1().Secrets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // an API server that serves no Secrets: no token to mount
	}
	if err != nil {
		return nil, &volumeError{fmt.Errorf("service account %q token: %w", sa, err)}
	}
	for _, s := range secrets.Items {
		if s.Type != corev1.SecretTypeServiceAccountToken || s.Annotations[corev1.ServiceAccountNameKey] != sa || len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			continue
		}
		dir := filepath.Join(w.a.podVolumeDir(pod.UID), "kube-api-access")
		files := map[string][]byte{"token": s.Data[corev1.ServiceAccountTokenKey], "ca.crt": s.Data[corev1.ServiceAccountRootCAKey], "namespace": []byte(pod.Namespace)}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return nil, err
			}
		}
		return &Mount{Source: dir, Target: saMountPath, ReadOnly: true}, nil
	}
	return nil, nil
}
