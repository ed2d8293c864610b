package scheduler

import (
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	got := summary(3, map[string]int{reasonSelector: 2, "node(s) had untolerated taint {a: b}": 1})
	want := "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {a: b}."
	if got != want {
		t.Errorf("summary = %q\nwant      %q", got, want)
	}
	if got := summary(0, nil); !strings.HasPrefix(got, "0/0 nodes are available") {
		t.Errorf("summary with no nodes = %q", got)
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.SchedulerName != "default-scheduler" {
		t.Errorf("zero options = %+v, %v; want default-scheduler", o, err)
	}
	if err := (Options{SchedulerName: "Not A Name"}).Validate(); err == nil || !strings.Contains(err.Error(), "--scheduler-name") {
		t.Errorf("bad name: err %v, want one naming --scheduler-name", err)
	}
}
