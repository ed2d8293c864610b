package apiserver

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podConnectSubs are the pod subresources that reach the node: log is
// served through the node's agent; exec, attach and portforward are
// answered with why nodenet has none.
var podConnectSubs = map[string]bool{"log": true, "exec": true, "attach": true, "portforward": true}

// logParams are the PodLogOptions query parameters handed to the agent,
// which validates them (the kubelet's containerLogs API takes the same).
var logParams = []string{"follow", "previous", "timestamps", "tailLines", "limitBytes", "sinceSeconds", "sinceTime", "stream"}

// servePodConnect serves pods/{name}/log|exec|attach|portforward.
func (s *Server) servePodConnect(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	if req.sub != "log" {
		s.fail(w, r, notSupported(req))
		return
	}
	if r.Method != http.MethodGet {
		s.fail(w, r, apierrors.NewMethodNotSupported(req.gr(), r.Method))
		return
	}
	obj, err := s.getObject(r.Context(), req, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pod := obj.(*corev1.Pod)
	q := r.URL.Query()
	ctr, err := logContainer(pod, q.Get("container"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if pod.Spec.NodeName == "" {
		s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name)))
		return
	}
	fwd := url.Values{}
	for _, k := range logParams {
		if v, ok := q[k]; ok {
			fwd[k] = v
		}
	}
	resp, err := s.nodeRequest(r.Context(), pod.Spec.NodeName, "/containerLogs/"+pod.Namespace+"/"+pod.Name+"/"+ctr, fwd)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return // EOF, or the client went away and ended the request
		}
	}
}

// logContainer picks the container whose log is asked for, with
// kube-apiserver's errors for a missing or unknown name.
func logContainer(pod *corev1.Pod, name string) (string, error) {
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	switch {
	case name == "" && len(pod.Spec.Containers) == 1:
		return pod.Spec.Containers[0].Name, nil
	case name == "":
		return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
	case !slices.Contains(names, name):
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
	}
	return name, nil
}

// notSupported answers exec, attach and portforward. 405 MethodNotAllowed
// is kube-apiserver's code for a subresource that does not take the
// request, and kubectl prints the message as it is.
func notSupported(req *apiRequest) error {
	why := map[string]string{
		"exec":        "pod containers are host processes in the pod's network namespace, not container images; run commands there with `ip netns exec <netns> ...` on the node (the namespace is in the pod's nodenet.io/netns annotation)",
		"attach":      "containers write to their log; read it with `kubectl logs -f`",
		"portforward": "pod IPs are routable from every node; connect to the pod IP from a node, or expose the pod with a Service",
	}[req.sub]
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Message: fmt.Sprintf("pods/%s is not supported by nodenet: %s", req.sub, why),
		Details: &metav1.StatusDetails{Name: req.name, Kind: "pods/" + req.sub},
	}}
}
