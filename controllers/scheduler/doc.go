// Package scheduler is a small pod scheduler: it binds pods that name it in
// spec.schedulerName to a node, through the pods/binding subresource as
// kube-scheduler does, so that a cluster made of this suite runs pods
// without kube-scheduler.
//
// A node fits a pod when it is Ready, schedulable (or the pod tolerates
// node.kubernetes.io/unschedulable), carries no NoSchedule or NoExecute
// taint the pod does not tolerate, and matches the pod's nodeSelector and
// required node affinity. Among the nodes that fit, the one running the
// fewest non-terminal pods wins, ties going to the lowest name; that spreads
// pods evenly, which is what a networking test bed needs. Resources,
// ports, volumes, preferred affinities, pod (anti-)affinity, topology
// spread and preemption are not considered.
//
// The informer learns about a binding only after the API server has made
// it, so a burst of pods would all see the same counts and land on one
// node. Each binding is therefore "assumed" in memory until the informer
// shows it, and assumed pods count towards their node.
//
// A pod that fits nowhere gets a FailedScheduling event and a PodScheduled
// condition False (reason Unschedulable) whose message says why each node
// was rejected, in kube-scheduler's words. It is tried again when a node is
// added or changes in a way that can matter (labels, taints,
// schedulability, readiness), or when the pod itself changes.
package scheduler
