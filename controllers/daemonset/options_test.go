package daemonset

import (
	"strings"
	"testing"
	"time"
)

func TestOptions(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	o, _ := Options{}.withDefaults()
	if o != DefaultOptions() {
		t.Errorf("zero options default to %+v, want %+v", o, DefaultOptions())
	}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{BurstReplicas: -1}, "burst replicas"},
		{Options{FailedPodBackoff: -time.Second}, "failed pod backoff"},
		{Options{FailedPodBackoff: time.Minute, MaxFailedPodBackoff: time.Second}, "must not be shorter"},
	} {
		if err := tc.opts.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.opts, err, tc.want)
		}
	}
}
