// Package daemonset is the DaemonSet controller: it runs one pod of each
// apps/v1 DaemonSet on every node the DaemonSet's template may run on, and
// replaces them when the template changes. nodenet deploys its own node
// daemons this way (daemonset/nodenet.yaml), on the local cluster as on
// any other.
//
// It follows kube-controller-manager's DaemonSet controller in what users
// and tools can observe:
//
//   - Placement: the template's nodeName, nodeSelector and required node
//     affinity, and taints against tolerations — a NoSchedule or NoExecute
//     taint keeps new pods away, only a NoExecute one removes a running
//     pod. Every daemon pod tolerates node.kubernetes.io/not-ready and
//     unreachable (NoExecute), disk-, memory- and pid-pressure and
//     unschedulable (NoSchedule), and, with hostNetwork,
//     network-unavailable: node daemons must run on sick and cordoned nodes
//     and ahead of the pod network.
//   - Pods are the template plus the labels controller-revision-hash and
//     pod-template-generation, owned by the DaemonSet (controller: true).
//     They are bound with spec.nodeName when created; kube's controller
//     pins them with node affinity and leaves binding to the scheduler,
//     which gains nothing here, where no resources are accounted.
//   - History: one ControllerRevision per template, in the format kubectl
//     rollout history and undo read; spec.revisionHistoryLimit old ones are
//     kept (and any a live pod was made from).
//   - Updates: RollingUpdate deletes out-of-date pods only while fewer than
//     maxUnavailable nodes lack an available pod (available: Ready for
//     minReadySeconds), or with maxSurge starts the new pod beside the old
//     one first; a node's new pod is created only once its old pod is gone,
//     so a host-network daemon never meets its predecessor on a port.
//     OnDelete replaces a pod only when someone deletes it. A rollout
//     restart (an annotation on the template) is a template change like
//     any other.
//   - Ownership: a pod without a controller whose labels match a
//     DaemonSet's selector is adopted; an owned pod whose labels stop
//     matching is released (its owner reference removed), as upstream.
//   - Failed and finished pods are deleted and recreated, failed ones with
//     a per-node back-off; pods deleted by anyone are recreated.
//   - Status carries the counts `kubectl get ds` prints and `kubectl
//     rollout status` waits on, with observedGeneration.
//
// The bundled API server has no garbage collector, so the controller
// removes what a DaemonSet owned when it goes: pods and revisions whose
// controller reference names a DaemonSet that no longer exists (or was
// replaced by another of the same name) are deleted. Deleting a DaemonSet
// with --cascade=orphan therefore still removes its pods here. Pods bound
// to a node that no longer exists are deleted too (the pod garbage
// collector's job upstream).
//
// The controller decides from its informers' caches and must not act on a
// cache that lags its own writes (it would start a second pod on a node):
// a tracker holds a DaemonSet's pod writes until the cache shows them, and
// the DaemonSet is only synced again once it does.
package daemonset
