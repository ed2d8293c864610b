// Package nodelifecycle notices nodes that stopped heartbeating and makes the
// rest of the cluster stop relying on them, the part of kube-controller-
// manager's node lifecycle controller this suite needs.
//
// A node heartbeats by renewing its Lease in kube-node-lease (named after
// the node) and, less often, by posting its Ready condition. When neither
// has moved for --node-monitor-grace-period, the node's Ready condition is
// set to Unknown (reason NodeStatusUnknown), it gets the
// node.kubernetes.io/unreachable taints (NoSchedule keeps the scheduler away,
// NoExecute tells tolerating workloads the node is gone), and the Ready and
// ContainersReady conditions of its pods are set to False (reason
// NodeNotReady) so the EndpointSlice controller takes them out of service.
//
// Heartbeat age is measured on this controller's clock, from the moment a
// change of the heartbeat was observed, not from the timestamps the node
// wrote: a node whose clock is off must not look dead (or alive). The price,
// as upstream, is that after a restart a silent node is noticed one grace
// period later, unless it was already marked before the restart.
//
// When the lease is renewed again the unreachable taints are removed, and
// Ready is set back to True (reason NodeLeaseRenewed) if and only if this
// controller set it to Unknown; in this suite the node agent heartbeats
// mainly through the lease, so nobody else would. Pod readiness is not
// restored here: only the node agent (the kubelet's role) knows whether the
// containers are ready again, and it posts that itself.
//
// Pods on an unreachable node are evicted (deleted) once their toleration
// of the unreachable NoExecute taint runs out, as upstream's taint manager
// does: the smallest tolerationSeconds among the pod's tolerations of the
// taint, counted from the taint's timeAdded; a toleration without
// tolerationSeconds keeps the pod for good, and a pod tolerating nothing
// goes at once. The bundled API server's admission gives every pod that
// does not say otherwise 300 s (upstream's DefaultTolerationSeconds), the
// DaemonSet controller gives its pods the unlimited toleration. An evicted
// pod is terminating: the EndpointSlice controller keeps its endpoint with
// ready=false, terminating=true, and it leaves the Service when the pod is
// gone, once the node agent confirms (when the node is back) or at once
// for a grace period of 0.
//
// A node that heartbeats but reports Ready=False itself (nodenet's agent
// does while no CNI conflist is installed: flanneld has not set the node's
// network up) gets the node.kubernetes.io/not-ready NoSchedule and
// NoExecute taints instead, as upstream's controller sets them: its pods
// are marked not ready (their endpoints leave the Services) and evicted
// once their toleration of the not-ready NoExecute taint runs out; the
// taints go when the node reports any other Ready, and an unreachable
// node's not-ready taints give way to the unreachable ones.
package nodelifecycle
