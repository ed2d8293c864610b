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
// Images are not pulled. The rule: a container's command+args run as a
// host binary inside the pod's network namespace (the image is ignored);
// a command "nodenet" runs this binary, so `nodenet echo` is the built-in
// test server. A command that does not exist fails the pod with a clear
// message. Readiness probes (tcp, http, exec) set the Ready condition.
// Deletion is graceful: SIGTERM, the grace period, SIGKILL, CNI DEL,
// namespace removal, then the pod is deleted with grace 0.
//
// Per-pod state (<state-dir>/<uid>.json) lets a restarted agent adopt the
// pods still running; at start it calls CNI GC with the live attachments.
//
// Containers run through `nodenet logshim`, which writes their output as
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
