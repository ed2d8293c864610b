// Package node is the nodenet agent: the part of the kubelet that matters
// for networking, for clusters built of network namespaces.
//
// It registers its Node, heartbeats a Lease in kube-node-lease and keeps
// the NodeReady condition, and runs the pods bound to it. For each pod it
// creates a network namespace (<prefix><uid[:8]>), calls the CNI plugin
// through libcni with the node's conflist exactly as containerd does
// (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME/K8S_POD_INFRA_CONTAINER_ID/
// K8S_POD_UID, the portMappings capability), and starts the containers.
//
// With Options.PodCgroup (--pod-cgroup; the local cluster's node cgroup)
// every pod process, containers and exec probes, starts in that cgroup
// (clone3 into it, so no socket is ever opened outside it); without it
// they stay in the agent's, as on a real node.
//
// A hostNetwork pod gets no namespace and no CNI call: its containers run
// in the agent's own network namespace (the node's) and its podIP is the
// node's IP; everything else is as for other pods.
//
// Images are not pulled. The rule: a container's command+args, after the
// kubelet's $(VAR) expansion, run as a host binary inside the pod's
// network namespace (the image is ignored). The nodenet image's binary
// paths are mapped to the built binaries: daemonset.NodenetPath
// (/usr/local/bin/nodenet) and the bare command "nodenet" run this binary
// (so `nodenet echo` is the built-in test server), daemonset.NodenetCNIPath
// (/usr/local/bin/nodenet-cni) the nodenet-cni next to it, and
// daemonset.NodenetProxyPath (/usr/local/bin/nodenet-proxy) the
// nodenet-proxy next to it, or `nodenet proxy` when that was not built
// (the same code: proxy/proxycmd). Such a
// container also sees the built binaries at those paths (bound read-only
// in its mount namespace), so arguments naming them work (install-cni
// --source /usr/local/bin/nodenet-cni). Any other command is looked up on
// the host; one that does not exist fails the pod
// with a Failed event and status message saying the image is not pulled
// and which paths are mapped. Readiness probes (tcp, http with its host,
// exec) set the Ready condition. A stopped container (deletion, a failed
// liveness probe) runs its preStop hook first (sleep, exec in its
// namespaces, or an HTTP GET to the pod), bounded by the grace period,
// then gets SIGTERM and, once the rest of the grace period (at least 2 s
// after a hook, as the kubelet leaves) has passed, SIGKILL; a failed or
// cut-short hook is a FailedPreStopHook event. Init containers run one at a time, in
// order, to completion before the containers start; a failed one is
// restarted with the crash-loop back-off (the pod fails under
// restartPolicy Never).
//
// Env: literal values, the downward API's fieldRefs (metadata.name,
// namespace, uid, labels['k'], annotations['k'], spec.nodeName,
// spec.serviceAccountName, status.podIP, status.hostIP), configMapKeyRef
// and secretKeyRef (read at each container start; optional keys), envFrom,
// and $(VAR) expansion in values, command and args exactly as the kubelet
// does ($$ escapes, unknown references stay). A ConfigMap or key that is
// missing keeps the container waiting (CreateContainerConfigError) and is
// retried.
//
// Volumes: hostPath (its type's checks and creation as the kubelet does)
// resolves a path P to <HostRoot>/P: "/" on a real host, a per-node
// directory in the local cluster, whose nodes share one filesystem.
// configMap (items, defaultMode, mode) and emptyDir volumes are
// directories under <state-dir>/volumes/<uid>; a configMap volume is
// rewritten atomically (a new timestamped directory and one rename of its
// "..data" link) when the ConfigMap changes, checked once a minute. The
// shim binds every volume on its mountPath (readOnly honoured) in a
// private mount namespace of the container's own (shim.ExecWithMounts); a
// mount path missing on the host is created in a tmpfs shadowing its
// nearest existing parent, which holds that parent's entries bound back,
// so the host's filesystem is never written.
//
// In-cluster config, which the DaemonSet's daemons use: containers get
// KUBERNETES_SERVICE_HOST/PORT (Options.APIServer, else the kubernetes
// Service's), and unless automountServiceAccountToken is false, the
// service account's credentials at
// /var/run/secrets/kubernetes.io/serviceaccount: a TokenRequest token
// bound to the pod, renewed at 80% of its lifetime (written by rename, so
// readers never see half a token), ca.crt from Options.APIServerCA and
// the namespace. When the API server has no TokenRequest or the account
// does not exist, nothing is mounted.
// Deletion is graceful: SIGTERM, the grace period, SIGKILL, CNI DEL,
// namespace removal, then the pod is deleted with grace 0.
//
// Per-pod state (<state-dir>/<uid>.json) lets a restarted agent adopt the
// pods still running; at start it calls CNI GC with the live attachments.
// A record whose namespace is gone (the node rebooted) is not adopted:
// the pod is posted not ready at once (Ready and ContainersReady False,
// reason SandboxChanged), so its Services stop sending to the dead IP
// while the old attachment is released with a CNI DEL (its IP does not
// leak) and the new sandbox is added.
//
// Pod status is written when it changes, and also when the API's copy
// disagrees on the phase or readiness (someone else wrote it: the node
// lifecycle controller sets a silent node's pods not ready), as the
// kubelet's status manager reconciles; so a node that was cut off puts
// its pods back into their Services once it can reach the API again.
//
// Containers run through the shim (package shim: nodenet-shim beside
// this binary, or `nodenet logshim` when only nodenet was built; see
// shimCommand), which writes their output as
// CRI log lines (<state-dir>/logs/<ns>_<pod>_<uid>/<container>/<run>.log,
// one file per run so the previous run's log survives a restart) and
// outlives an agent restart. The agent serves them on the kubelet port
// (HTTPS, GET /containerLogs/<ns>/<pod>/<container> with the kubelet's
// query parameters) to the API server only; server.go says how each side
// authenticates the other. Exited containers restart with the kubelet's
// crash-loop back-off; container states carry their times, exit codes and
// last state, and the agent records the kubelet's events (Created,
// Started, Killing, BackOff and Failed) with source component "kubelet".
//
// The Node reports the machine: capacity and allocatable cpu, memory,
// ephemeral-storage and pods, kernel, OS image, machine and boot IDs, and
// nodenet://<version> as the container runtime.
package node
