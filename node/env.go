package node

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// expandVars replaces $(NAME) in s by vars[NAME] as the kubelet does for
// env values, command and args: "$$" is an escaped "$", a reference to a
// variable that is not defined stays as written, and a "$" not followed
// by "(" or "$" is kept.
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:]) // unterminated: as written
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envConfigError is a container whose env or volumes cannot be built yet
// (a ConfigMap or Secret missing): the kubelet's CreateContainerConfigError,
// retried on the next sync rather than failing the pod.
type envConfigError struct{ err error }

func (e *envConfigError) Error() string { return e.err.Error() }
func (e *envConfigError) Unwrap() error { return e.err }

// containerEnv is a container's environment, in the kubelet's order: the
// variables every container gets, envFrom, then env, each value expanded
// against the ones before it.
func (w *podWorker) containerEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]string, map[string]string, error) {
	var names []string
	vars := map[string]string{}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			names = append(names, k)
		}
		vars[k] = v
	}
	set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	set("HOSTNAME", pod.Name)
	if pod.Spec.HostNetwork {
		set("HOSTNAME", w.a.o.NodeName) // the node's host name, as the kubelet sets it
	}
	// Kept from before the downward API was supported: pods of the local
	// cluster read these without declaring them.
	set("POD_NAME", pod.Name)
	set("POD_NAMESPACE", pod.Namespace)
	set("POD_IP", w.podIP())
	set("NODE_NAME", w.a.o.NodeName)
	apiEnv, err := w.apiServerEnv(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS"} {
		if v, ok := apiEnv[k]; ok {
			set(k, v)
		}
	}
	for _, from := range c.EnvFrom {
		data, err := w.envSource(ctx, pod.Namespace, from)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandVars(e.Value, vars))
			continue
		}
		v, ok, err := w.envValueFrom(ctx, pod, e.ValueFrom)
		if err != nil {
			return nil, nil, fmt.Errorf("container %q: env %s: %w", c.Name, e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(names))
	for _, k := range names {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional key
// that is missing (the variable is then not set).
func (w *podWorker) envValueFrom(ctx context.Context, pod *corev1.Pod, src *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := w.fieldValue(pod, src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		return w.keyRef("configmap", ref.Name, ref.Key, ref.Optional, func() (map[string][]byte, error) {
			cm, err := w.a.o.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			data := map[string][]byte{}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			return data, nil
		})
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		return w.keyRef("secret", ref.Name, ref.Key, ref.Optional, func() (map[string][]byte, error) {
			s, err := w.a.o.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return s.Data, nil
		})
	}
	return "", false, &podError{"CreateContainerConfigError", "", fmt.Errorf("unsupported valueFrom (only fieldRef, configMapKeyRef and secretKeyRef)")}
}

// keyRef is one key of a ConfigMap or Secret (read by get); a missing
// object or key is an envConfigError unless optional (then ok is false).
func (w *podWorker) keyRef(kind, name, key string, optional *bool, get func() (map[string][]byte, error)) (string, bool, error) {
	opt := optional != nil && *optional
	data, err := get()
	if apierrors.IsNotFound(err) && opt {
		return "", false, nil
	}
	if err != nil {
		return "", false, &envConfigError{fmt.Errorf("%s %q: %w", kind, name, err)}
	}
	if v, ok := data[key]; ok {
		return string(v), true, nil
	}
	if opt {
		return "", false, nil
	}
	return "", false, &envConfigError{fmt.Errorf("key %q not found in %s %q", key, kind, name)}
}

// envSource reads an envFrom's ConfigMap or Secret.
func (w *podWorker) envSource(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.ConfigMapRef != nil:
		cm, err := w.a.o.Client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
			return out, nil
		}
		if err != nil {
			return nil, &envConfigError{fmt.Errorf("envFrom configmap %q: %w", from.ConfigMapRef.Name, err)}
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := w.a.o.Client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
			return out, nil
		}
		if err != nil {
			return nil, &envConfigError{fmt.Errorf("envFrom secret %q: %w", from.SecretRef.Name, err)}
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	}
	return out, nil
}

// fieldValue is the downward API's value of a fieldRef path.
func (w *podWorker) fieldValue(pod *corev1.Pod, path string) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return w.podIP(), nil
	case "status.podIPs":
		return w.podIP(), nil
	case "status.hostIP", "status.hostIPs":
		return w.a.o.NodeIP, nil
	}
	return "", &podError{"CreateContainerConfigError", "", fmt.Errorf("unsupported fieldRef %q", path)}
}

// subscript parses "<field>['key']" (the downward API's map syntax).
func subscript(path, field string) (string, bool) {
	rest, ok := strings.CutPrefix(path, field+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

func (w *podWorker) podIP() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sb == nil || len(w.sb.IPs) == 0 {
		return ""
	}
	return w.sb.IPs[0]
}
