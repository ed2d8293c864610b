package nodelifecycle

import (
	"fmt"
	"time"
)

// Options configures the controller. Zero values mean the defaults.
type Options struct {
	// NodeMonitorGracePeriod is how long a node may go without a heartbeat
	// before it is considered unreachable (flag --node-monitor-grace-period,
	// default 40s).
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod is how often every node is checked (flag
	// --node-monitor-period, default 1s). Each node is also checked exactly
	// when its grace period runs out, so this is a safety net, not the
	// detection latency.
	NodeMonitorPeriod time.Duration
}

// DefaultOptions returns the flag defaults.
func DefaultOptions() Options {
	return Options{NodeMonitorGracePeriod: 40 * time.Second, NodeMonitorPeriod: time.Second}
}

// Validate reports what is wrong with o (zero values meaning defaults); New
// refuses the same.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = d.NodeMonitorGracePeriod
	}
	if o.NodeMonitorPeriod == 0 {
		o.NodeMonitorPeriod = d.NodeMonitorPeriod
	}
	if o.NodeMonitorGracePeriod < 0 {
		return o, fmt.Errorf("--node-monitor-grace-period %v: must be positive", o.NodeMonitorGracePeriod)
	}
	if o.NodeMonitorPeriod < 0 {
		return o, fmt.Errorf("--node-monitor-period %v: must be positive", o.NodeMonitorPeriod)
	}
	if o.NodeMonitorPeriod >= o.NodeMonitorGracePeriod {
		return o, fmt.Errorf("--node-monitor-period %v must be shorter than --node-monitor-grace-period %v", o.NodeMonitorPeriod, o.NodeMonitorGracePeriod)
	}
	return o, nil
}
