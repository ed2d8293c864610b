package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podLogDir holds a pod's container logs, <container>/<run>.log, like the
// kubelet's /var/log/pods/<ns>_<name>_<uid>. The UID keeps a re-created
// pod of the same name from reading the old one's logs.
func (a *Agent) podLogDir(namespace, name string, uid types.UID) string {
	return filepath.Join(a.o.StateDir, "logs", fmt.Sprintf("%s_%s_%s", namespace, name, uid))
}

// containerLogPath is the log of one run; run counts restarts, so the
// previous run's log stays beside the current one.
func (a *Agent) containerLogPath(namespace, name string, uid types.UID, ctr string, run int32) string {
	return filepath.Join(a.podLogDir(namespace, name, uid), ctr, strconv.Itoa(int(run))+".log")
}

// logRuns lists the runs that have a log, oldest first.
func logRuns(dir string) []int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var runs []int
	for _, f := range files {
		if n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".log")); err == nil {
			runs = append(runs, n)
		}
	}
	slices.Sort(runs)
	return runs
}

// logOptions are the kubelet's containerLogs query parameters.
type logOptions struct {
	follow, previous, timestamps bool
	tail                         int64 // -1: all
	limit                        int64 // 0: no limit
	since                        time.Time
	stream                       string // "stdout", "stderr" or "" for both
}

// errBadLogRequest marks a request the caller must fix (HTTP 400).
var errBadLogRequest = errors.New("bad log request")

func parseLogOptions(q url.Values) (logOptions, error) {
	o := logOptions{tail: -1}
	bad := func(format string, args ...any) (logOptions, error) {
		return o, fmt.Errorf("%w: "+format, append([]any{errBadLogRequest}, args...)...)
	}
	for name, dst := range map[string]*bool{"follow": &o.follow, "previous": &o.previous, "timestamps": &o.timestamps} {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("%s=%q is not a boolean", name, v)
			}
			*dst = b
		}
	}
	for name, dst := range map[string]*int64{"tailLines": &o.tail, "limitBytes": &o.limit} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || (name == "limitBytes" && n == 0) {
				return bad("%s=%q must be a %s integer", name, v, map[bool]string{true: "positive", false: "non-negative"}[name == "limitBytes"])
			}
			*dst = n
		}
	}
	secs, stamp := q.Get("sinceSeconds"), q.Get("sinceTime")
	switch {
	case secs != "" && stamp != "":
		return bad("at most one of sinceTime or sinceSeconds may be specified")
	case secs != "":
		n, err := strconv.ParseInt(secs, 10, 64)
		if err != nil || n < 1 {
			return bad("sinceSeconds=%q must be a positive integer", secs)
		}
		o.since = time.Now().Add(-time.Duration(n) * time.Second)
	case stamp != "":
		t, err := time.Parse(time.RFC3339, stamp)
		if err != nil {
			return bad("sinceTime=%q is not an RFC 3339 time", stamp)
		}
		o.since = t
	}
	switch v := q.Get("stream"); v {
	case "", "All":
	case "Stdout", "Stderr":
		o.stream = strings.ToLower(v)
	default:
		return bad("stream=%q must be All, Stdout or Stderr", v)
	}
	if o.follow && o.previous {
		o.follow = false // a previous run's log does not grow
	}
	return o, nil
}

// wants reports whether a record passes the since and stream filters.
// Records without a time (written without the shim) always pass.
func (o logOptions) wants(r logRecord) bool {
	if o.stream != "" && r.stream != "" && r.stream != o.stream {
		return false
	}
	return o.since.IsZero() || r.t.IsZero() || !r.t.Before(o.since)
}

// logRecord is one parsed CRI log line.
type logRecord struct {
	t       time.Time
	stream  string
	full    bool
	content []byte
}

// parseRecord reads a CRI log line (without its newline). A line that is
// not one (output written without the shim) is taken as a full line with
// no time.
func parseRecord(line []byte) logRecord {
	parts := bytes.SplitN(line, []byte(" "), 4)
	if len(parts) == 4 {
		if t, err := time.Parse(time.RFC3339Nano, string(parts[0])); err == nil && (string(parts[2]) == "F" || string(parts[2]) == "P") {
			return logRecord{t: t, stream: string(parts[1]), full: string(parts[2]) == "F", content: parts[3]}
		}
	}
	return logRecord{full: true, content: line}
}

// logWriter writes records as the kubelet does and enforces limitBytes.
type logWriter struct {
	w         io.Writer
	o         logOptions
	remaining int64
}

// write reports false once the limit is reached or the client is gone.
func (lw *logWriter) write(r logRecord) bool {
	if !lw.o.wants(r) {
		return true
	}
	var b []byte
	if lw.o.timestamps {
		b = append(r.t.UTC().AppendFormat(b, time.RFC3339Nano), ' ')
	}
	b = append(b, r.content...)
	if r.full {
		b = append(b, '\n')
	}
	if lw.o.limit > 0 {
		if int64(len(b)) >= lw.remaining {
			_, _ = lw.w.Write(b[:lw.remaining])
			lw.remaining = 0
			return false
		}
		lw.remaining -= int64(len(b))
	}
	if _, err := lw.w.Write(b); err != nil {
		return false
	}
	if f, ok := lw.w.(http.Flusher); ok && lw.o.follow {
		f.Flush()
	}
	return true
}

// splitComplete returns the complete lines in data and how many bytes
// they take; an unfinished last line waits for more output.
func splitComplete(data []byte) ([][]byte, int) {
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return nil, 0
	}
	return bytes.Split(data[:end], []byte("\n")), end + 1
}

// streamLog writes the log at path; with follow it keeps writing what is
// appended until running reports false or ctx ends.
func streamLog(ctx context.Context, path string, o logOptions, w io.Writer, running func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read container log: %w", err)
	}
	lines, used := splitComplete(data)
	pending := data[used:]
	recs := make([]logRecord, 0, len(lines))
	for _, l := range lines {
		if r := parseRecord(l); o.wants(r) {
			recs = append(recs, r)
		}
	}
	if o.tail >= 0 && int64(len(recs)) > o.tail {
		recs = recs[int64(len(recs))-o.tail:]
	}
	lw := &logWriter{w: w, o: o, remaining: o.limit}
	for _, r := range recs {
		if !lw.write(r) {
			return nil
		}
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if !o.follow {
		return nil
	}
	buf := make([]byte, 64<<10)
	for last := false; ; {
		n, err := f.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			lines, used := splitComplete(pending)
			for _, l := range lines {
				if !lw.write(parseRecord(l)) {
					return nil
				}
			}
			pending = append(pending[:0], pending[used:]...)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read container log: %w", err)
		}
		if last {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		// One more read after the container ended picks up its last words.
		last = !running()
	}
}

// serveContainerLogs answers the kubelet's
// GET /containerLogs/<namespace>/<pod>/<container>.
func (a *Agent) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		http.Error(w, "want /containerLogs/<namespace>/<pod>/<container>", http.StatusBadRequest)
		return
	}
	ns, name, ctrName := parts[0], parts[1], parts[2]
	o, err := parseLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pw, pod := a.findPod(ns, name)
	if pw == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running on node %s", ns, name, a.o.NodeName), http.StatusNotFound)
		return
	}
	if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == ctrName }) {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", ctrName, name), http.StatusBadRequest)
		return
	}
	dir := filepath.Dir(a.containerLogPath(ns, name, pod.UID, ctrName, 0))
	runs := logRuns(dir)
	pw.mu.Lock()
	ctr := pw.ctrs[ctrName]
	current := -1
	if ctr != nil {
		current = int(ctr.restarts)
	}
	pw.mu.Unlock()
	if current < 0 && len(runs) > 0 {
		current = runs[len(runs)-1]
	}
	run := current
	if o.previous {
		i := slices.IndexFunc(runs, func(n int) bool { return n >= current })
		if i <= 0 {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", ctrName, name), http.StatusBadRequest)
			return
		}
		run = runs[i-1]
	}
	if !slices.Contains(runs, run) {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", ctrName, name), http.StatusBadRequest)
		return
	}
	running := func() bool {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		c := pw.ctrs[ctrName]
		return c != nil && int(c.restarts) == run && !c.exited && !pw.gone
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := streamLog(r.Context(), a.containerLogPath(ns, name, pod.UID, ctrName, int32(run)), o, w, running); err != nil {
		a.log.Warn("serve container log", "pod", ns+"/"+name, "container", ctrName, "err", err)
	}
}

// findPod returns the worker of a pod on this node and its latest spec.
func (a *Agent) findPod(namespace, name string) (*podWorker, *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.pods {
		w.mu.Lock()
		p := w.latest
		w.mu.Unlock()
		if p != nil && p.Namespace == namespace && p.Name == name {
			return w, p
		}
	}
	return nil, nil
}
