package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/internal/atomicfile"
)

// What a pod needs for client-go's in-cluster config, which the node
// daemons of the DaemonSet use: KUBERNETES_SERVICE_HOST/PORT and the
// service account's token, CA and namespace at saMountPath.
//
// The token comes from the TokenRequest API, bound to the pod so that it
// dies with it, and is refreshed at 80% of its lifetime as the kubelet
// does; each file is replaced by a rename, so a reader sees the old token
// or the new one, never half of one. Without the API (404) or the account
// nothing is mounted, as for the pods that never talk to the API. The
// address is Options.APIServer when set (the local cluster: its pods
// reach the API server directly, not through the kubernetes Service's
// ClusterIP that the proxy in that very pod programs), else the kubernetes
// Service's, as the kubelet sets it.
const (
	saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	saVolume    = "kube-api-access"
	// tokenLifetime is what the agent asks for; the server may grant less.
	tokenLifetime = time.Hour
	// tokenRetry: how soon a failed refresh is tried again (the old token
	// still has a fifth of its life).
	tokenRetry = 10 * time.Second
)

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
// out or no token can be had.
func (w *podWorker) serviceAccountMount(ctx context.Context, pod *corev1.Pod, c corev1.Container) (*Mount, error) {
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		return nil, nil
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == saMountPath {
			return nil, nil // the pod brings its own
		}
	}
	dir := filepath.Join(w.a.podVolumeDir(pod.UID), saVolume)
	// Written for an earlier container of the pod and not yet due.
	if !w.tokenRefreshAt.IsZero() && time.Now().Before(w.tokenRefreshAt) {
		return &Mount{Source: dir, Target: saMountPath, ReadOnly: true}, nil
	}
	ok, err := w.writeServiceAccountToken(ctx, pod, dir)
	if err != nil || !ok {
		return nil, err
	}
	return &Mount{Source: dir, Target: saMountPath, ReadOnly: true}, nil
}

// writeServiceAccountToken requests a token bound to pod and writes the
// volume's files; false when the API has no TokenRequest or the account
// does not exist.
func (w *podWorker) writeServiceAccountToken(ctx context.Context, pod *corev1.Pod, dir string) (bool, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	asked := time.Now()
	tr, err := w.a.o.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil // no such account, or an API server without TokenRequest
	}
	if err != nil {
		return false, &volumeError{fmt.Errorf("service account %q token: %w", sa, err)}
	}
	files := map[string][]byte{"token": []byte(tr.Status.Token), "namespace": []byte(pod.Namespace)}
	if len(w.a.o.APIServerCA) > 0 {
		files["ca.crt"] = w.a.o.APIServerCA
	}
	for name, b := range files {
		// 0644 as the kubelet's projected volume: the container may run
		// as any user.
		if err := atomicfile.Write(filepath.Join(dir, name), b, 0o644); err != nil {
			return false, &volumeError{fmt.Errorf("service account %q token: %w", sa, err)}
		}
	}
	life := tr.Status.ExpirationTimestamp.Sub(asked)
	w.tokenRefreshAt = asked.Add(life * 8 / 10)
	return true, nil
}

// refreshServiceAccountToken renews the pod's token once 80% of its
// lifetime has passed. A worker that adopted a running pod from an
// earlier agent does not know when the token on disk expires: it renews
// it at once.
func (w *podWorker) refreshServiceAccountToken(ctx context.Context, pod *corev1.Pod) {
	dir := filepath.Join(w.a.podVolumeDir(pod.UID), saVolume)
	if w.tokenRefreshAt.IsZero() {
		if w.tokenAdoptChecked {
			return
		}
		w.tokenAdoptChecked = true
		if _, err := os.Stat(filepath.Join(dir, "token")); err != nil {
			return // nothing mounted
		}
	} else if time.Now().Before(w.tokenRefreshAt) {
		return
	}
	ok, err := w.writeServiceAccountToken(ctx, pod, dir)
	switch {
	case err != nil:
		w.a.log.Warn("refresh service account token", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		w.tokenRefreshAt = time.Now().Add(tokenRetry)
	case !ok:
		// The account is gone: the token on disk dies with it, as
		// upstream; try again later in case it comes back.
		w.tokenRefreshAt = time.Now().Add(tokenRetry)
	}
}
