package daemonset

import (
	"fmt"
	"time"
)

// Options configures the controller. Zero values mean the defaults.
type Options struct {
	// BurstReplicas caps the pods one sync creates or deletes; the rest
	// follow in the next sync (kube-controller-manager's
	// daemonset-controller burst, default 250).
	BurstReplicas int
	// FailedPodBackoff is the first wait before a failed daemon pod is
	// replaced again on the same node; it doubles up to
	// MaxFailedPodBackoff (defaults 1s and 15m, as upstream), so a node
	// that keeps rejecting the pod is not flooded with new ones.
	FailedPodBackoff    time.Duration
	MaxFailedPodBackoff time.Duration
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{BurstReplicas: 250, FailedPodBackoff: time.Second, MaxFailedPodBackoff: 15 * time.Minute}
}

// Validate reports what is wrong with o (zero values meaning defaults); New
// refuses the same.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.BurstReplicas == 0 {
		o.BurstReplicas = d.BurstReplicas
	}
	if o.FailedPodBackoff == 0 {
		o.FailedPodBackoff = d.FailedPodBackoff
	}
	if o.MaxFailedPodBackoff == 0 {
		o.MaxFailedPodBackoff = d.MaxFailedPodBackoff
	}
	switch {
	case o.BurstReplicas < 0:
		return o, fmt.Errorf("daemonset burst replicas %d: must be positive", o.BurstReplicas)
	case o.FailedPodBackoff < 0:
		return o, fmt.Errorf("daemonset failed pod backoff %v: must be positive", o.FailedPodBackoff)
	case o.MaxFailedPodBackoff < o.FailedPodBackoff:
		return o, fmt.Errorf("daemonset max failed pod backoff %v: must not be shorter than the first backoff %v", o.MaxFailedPodBackoff, o.FailedPodBackoff)
	}
	return o, nil
}
