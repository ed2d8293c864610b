package scheduler

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options configures the scheduler.
type Options struct {
	// SchedulerName selects the pods to schedule by their
	// spec.schedulerName (flag --scheduler-name, default
	// "default-scheduler"; empty means the default).
	SchedulerName string
}

// DefaultOptions returns the flag defaults.
func DefaultOptions() Options {
	return Options{SchedulerName: corev1.DefaultSchedulerName}
}

// Validate reports what is wrong with o (zero values meaning defaults); New
// refuses the same.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.SchedulerName == "" {
		o.SchedulerName = DefaultOptions().SchedulerName
	}
	if errs := validation.IsDNS1123Subdomain(o.SchedulerName); len(errs) > 0 {
		return o, fmt.Errorf("--scheduler-name %q: %s", o.SchedulerName, strings.Join(errs, "; "))
	}
	return o, nil
}
