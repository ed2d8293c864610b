package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"k8s.io/klog/v2"
)

// TestKlogComesOutAsJSON: what client-go logs through klog comes out of
// the subcommand's handler — JSON with --log-format json, at the klog
// call's level, with the component, filtered by --log-level.
func TestKlogComesOutAsJSON(t *testing.T) {
	t.Cleanup(klog.ClearLogger)
	lines := func(t *testing.T, level string, logKlog func()) []map[string]any {
		t.Helper()
		var buf bytes.Buffer
		l := LogFlags{level: level, format: "json"}
		if _, err := l.LoggerTo(&buf, "proxy"); err != nil {
			t.Fatal(err)
		}
		logKlog()
		klog.Flush()
		var out []map[string]any
		sc := bufio.NewScanner(&buf)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
			}
			out = append(out, m)
		}
		return out
	}

	got := lines(t, "info", func() {
		klog.ErrorS(errors.New("connection refused"), "Failed to watch", "resource", "services")
		klog.Infof("Caches populated for %s", "*v1.Service")
		klog.Error("plain error")
		klog.V(2).Info("verbose, dropped by klog's own verbosity")
	})
	want := []struct{ level, msg string }{
		{"ERROR", "Failed to watch"},
		{"INFO", "Caches populated for *v1.Service"},
		{"ERROR", "plain error"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i]["level"] != w.level || got[i]["msg"] != w.msg || got[i]["component"] != "proxy" {
			t.Errorf("line %d = %v, want level %s, msg %q, component proxy", i, got[i], w.level, w.msg)
		}
	}
	if got[0]["resource"] != "services" || got[0]["err"] != "connection refused" {
		t.Errorf("structured klog call lost its key/values: %v", got[0])
	}

	got = lines(t, "error", func() {
		klog.Info("below --log-level")
		klog.ErrorS(nil, "at --log-level")
	})
	if len(got) != 1 || got[0]["msg"] != "at --log-level" {
		t.Errorf("with --log-level error: %v, want only the error line", got)
	}
}
