// Package manager runs nodenet's controllers as one controller manager: a
// shared informer factory, an event recorder, /healthz + /metrics, and leader
// election on a coordination.k8s.io Lease so that two copies can run and only
// one acts. Which controllers exist and how they are configured is decided by
// the caller (cmd/nodenet), which hands in ready-made constructors.
package manager
