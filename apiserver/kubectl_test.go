package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/kubectltest"
	"github.com/nodenet/nodenet/internal/nettest"
)

// The oldest and the newest supported kubectl clients are exercised in
// depth; TestKubectlEveryVersionSmoke runs every one on the machine.
var kubectlVersions = []string{"1.27", "1.33"}

// kubectlBinaries finds kubectl.1.NN for every version in kubectlVersions
// (internal/kubectltest: skips without them, fails under
// NODENET_PRIVILEGED=1).
func kubectlBinaries(t *testing.T) map[string]string {
	t.Helper()
	return kubectltest.Versions(t, kubectlVersions...)
}

// kubectlCmd runs one kubectl binary against the test server.
type kubectlCmd struct {
	bin        string
	kubeconfig string
	cacheDir   string
	env        []string
}

func newKubectl(t *testing.T, bin, kubeconfig string) *kubectlCmd {
	home := t.TempDir() // no ~/.kube of the machine's user leaks in
	env := []string{"HOME=" + home}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "KUBECONFIG", "KUBECACHEDIR", "KUBECTL_KUBERC", "KUBERC":
			continue
		}
		env = append(env, kv)
	}
	return &kubectlCmd{bin: bin, kubeconfig: kubeconfig, cacheDir: filepath.Join(home, "cache"), env: env}
}

func (k *kubectlCmd) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir, "--request-timeout", "10s"}, args...)
	cmd := exec.CommandContext(ctx, k.bin, full...)
	cmd.Env = k.env
	cmd.WaitDelay = 2 * time.Second // never wait long for pipes after a kill
	return cmd
}

// run runs kubectl to completion (at most 20 s) and returns its output.
func (k *kubectlCmd) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := k.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("kubectl %s hung: killed after %v: %w", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	return out.String(), errOut.String(), err
}

// ok runs kubectl and fails the test unless it exits 0.
func (k *kubectlCmd) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := k.run(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fails runs kubectl, expects a non-zero exit status (not a hang) and
// returns stdout+stderr.
func (k *kubectlCmd) fails(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := k.run(t, args...)
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("kubectl %s: want a non-zero exit status, got err=%v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out + errOut
}

var errWatchNoExit = errors.New("kubectl get -w did not exit after being killed")

// kubectlTable parses kubectl's column output: the header's column names are
// separated by at least two spaces (tabwriter pads with three) and rows are
// cut at the header's column offsets, so empty cells are kept.
func kubectlTable(t *testing.T, out string) (header []string, rows []map[string]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) == "" {
		t.Fatalf("no table in output:\n%s", out)
	}
	sep := regexp.MustCompile(`\S+( \S+)*`) // names may hold single spaces ("LAST SEEN")
	var starts []int
	for _, loc := range sep.FindAllStringIndex(lines[0], -1) {
		header = append(header, lines[0][loc[0]:loc[1]])
		starts = append(starts, loc[0])
	}
	for _, line := range lines[1:] {
		if strings.TrimSpace(line) == "" {
			continue
		}
		row := map[string]string{}
		for i, col := range header {
			from, to := starts[i], len(line)
			if i+1 < len(starts) {
				to = min(starts[i+1], len(line))
			}
			if from < len(line) {
				row[col] = strings.TrimSpace(line[from:to])
			}
		}
		rows = append(rows, row)
	}
	return header, rows
}

func kubectlRow(t *testing.T, out, key, value string) map[string]string {
	t.Helper()
	_, rows := kubectlTable(t, out)
	for _, r := range rows {
		if r[key] == value {
			return r
		}
	}
	t.Fatalf("no row with %s=%s in:\n%s", key, value, out)
	return nil
}

func wantColumns(t *testing.T, what, out string, want ...string) {
	t.Helper()
	header, _ := kubectlTable(t, out)
	have := map[string]bool{}
	for _, h := range header {
		have[h] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("%s: column %s missing; header %q\n%s", what, w, header, out)
		}
	}
}

// wantLines checks that out holds each line (after trimming), in any order.
func wantLines(t *testing.T, what, out string, want ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		have[strings.TrimSpace(l)] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("%s: line %q missing in output:\n%s", what, w, out)
		}
	}
}

func wantContains(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: %q missing in output:\n%s", what, w, out)
		}
	}
}

// apiResourceRow is a row `kubectl api-resources` must print; short "*"
// leaves the short names unchecked.
type apiResourceRow struct{ name, gv, namespaced, kind, short string }

func wantAPIResources(t *testing.T, out string, want []apiResourceRow) {
	t.Helper()
	_, rows := kubectlTable(t, out)
	got := map[string]map[string]string{}
	for _, r := range rows {
		got[r["NAME"]+" "+r["APIVERSION"]] = r
	}
	for _, w := range want {
		r := got[w.name+" "+w.gv]
		if r == nil {
			t.Errorf("api-resources: no row for %s %s:\n%s", w.name, w.gv, out)
			continue
		}
		if r["NAMESPACED"] != w.namespaced || r["KIND"] != w.kind || (w.short != "*" && r["SHORTNAMES"] != w.short) {
			t.Errorf("api-resources %s %s: got %v, want namespaced=%s kind=%s shortnames=%q", w.name, w.gv, r, w.namespaced, w.kind, w.short)
		}
	}
}

// kubectlManifest is applied with `kubectl apply -f`: every kind the server
// serves that an application would ship.
func kubectlManifest(ns, color string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: %[1]s
  labels:
    app: web
spec:
  type: NodePort
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: http
    protocol: TCP
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  namespace: %[1]s
data:
  color: %[2]s
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: %[1]s
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: ["10.244.0.5"]
  conditions:
    ready: true
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: %[1]s
  labels:
    app: web
spec:
  containers:
  - name: web
    image: nginx:1.27
    ports:
    - name: http
      containerPort: 8080
`, ns, color)
}

// TestKubectl drives the oldest and the newest real kubectl against one
// server: discovery, client-side apply, printing, watch, patch, label,
// annotate, delete and the errors for what the server does not serve.
func TestKubectl(t *testing.T) {
	bins := kubectlBinaries(t)
	ts := startServer(t)
	for _, v := range kubectlVersions {
		bin := bins[v]
		t.Run("v"+v, func(t *testing.T) {
			t.Parallel()
			testKubectlClient(t, ts, newKubectl(t, bin, ts.KubeconfigPath()), strings.ReplaceAll(v, ".", ""))
		})
	}
}

func testKubectlClient(t *testing.T, ts *testServer, k *kubectlCmd, suffix string) {
	ctx := ctxT(t)
	c := ts.client
	ns := "kubectl-" + suffix

	t.Run("version", func(t *testing.T) {
		out := k.ok(t, "version")
		wantContains(t, "kubectl version", out, "Server Version:", apiserver.Version.GitVersion)
		var v struct {
			ServerVersion struct {
				Major, Minor, GitVersion string
			} `json:"serverVersion"`
		}
		js := k.ok(t, "version", "-o", "json")
		if err := json.Unmarshal([]byte(js), &v); err != nil {
			t.Fatalf("kubectl version -o json: %v\n%s", err, js)
		}
		if v.ServerVersion.GitVersion != apiserver.Version.GitVersion || v.ServerVersion.Minor != apiserver.Version.Minor {
			t.Errorf("serverVersion = %+v, want %s", v.ServerVersion, apiserver.Version.GitVersion)
		}
	})

	t.Run("api-resources", func(t *testing.T) {
		out := k.ok(t, "api-resources")
		wantColumns(t, "api-resources", out, "NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND")
		wantAPIResources(t, out, []apiResourceRow{
			{"pods", "v1", "true", "Pod", "po"},
			{"services", "v1", "true", "Service", "svc"},
			{"endpointslices", "discovery.k8s.io/v1", "true", "EndpointSlice", ""},
			{"leases", "coordination.k8s.io/v1", "true", "Lease", ""},
			{"nodes", "v1", "false", "Node", "no"},
			{"namespaces", "v1", "false", "Namespace", "ns"},
			{"configmaps", "v1", "true", "ConfigMap", "cm"},
			{"events", "v1", "true", "Event", "ev"},
			// kube-apiserver gives events.k8s.io events the short name
			// "ev" too; do not pin it here.
			{"events", "events.k8s.io/v1", "true", "Event", "*"},
		})
	})

	// apply: created, unchanged, configured.
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	writeManifest := func(color string) {
		t.Helper()
		if err := os.WriteFile(manifest, []byte(kubectlManifest(ns, color)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objects := func(verb string) []string {
		return []string{
			"namespace/" + ns + " " + verb,
			"service/web " + verb,
			"configmap/cfg " + verb,
			"endpointslice.discovery.k8s.io/web-abc " + verb,
			"pod/web-0 " + verb,
		}
	}
	writeManifest("blue")
	t.Run("apply", func(t *testing.T) {
		wantLines(t, "first apply", k.ok(t, "apply", "-f", manifest), objects("created")...)
		wantLines(t, "second apply", k.ok(t, "apply", "-f", manifest), objects("unchanged")...)
		writeManifest("green")
		out := k.ok(t, "apply", "-f", manifest)
		want := objects("unchanged")
		want[2] = "configmap/cfg configured"
		wantLines(t, "apply after a change", out, want...)
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cfg", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["color"] != "green" {
			t.Errorf("after apply configmap data = %v, want color=green", cm.Data)
		}
		// The named targetPort and the allocations survive the round trips.
		svc, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := svc.Spec.Ports; len(p) != 1 || p[0].TargetPort != intstr.FromString("http") || p[0].NodePort == 0 || svc.Spec.ClusterIP == "" {
			t.Errorf("service after apply: clusterIP=%q ports=%+v", svc.Spec.ClusterIP, p)
		}
	})
	if t.Failed() {
		t.FailNow() // everything below needs the applied objects
	}
	svc, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("get", func(t *testing.T) {
		out := k.ok(t, "get", "services", "-n", ns)
		wantColumns(t, "get services", out, "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE")
		r := kubectlRow(t, out, "NAME", "web")
		wantPorts := fmt.Sprintf("80:%d/TCP", svc.Spec.Ports[0].NodePort)
		if r["TYPE"] != "NodePort" || r["CLUSTER-IP"] != svc.Spec.ClusterIP || r["EXTERNAL-IP"] != "<none>" || r["PORT(S)"] != wantPorts {
			t.Errorf("get services row = %v, want NodePort %s <none> %s", r, svc.Spec.ClusterIP, wantPorts)
		}

		out = k.ok(t, "get", "svc", "-n", ns, "-o", "wide")
		wantColumns(t, "get svc -o wide", out, "SELECTOR")
		if r := kubectlRow(t, out, "NAME", "web"); r["SELECTOR"] != "app=web" {
			t.Errorf("get svc -o wide: SELECTOR = %q, want app=web", r["SELECTOR"])
		}

		out = k.ok(t, "get", "pods", "-n", ns)
		wantColumns(t, "get pods", out, "NAME", "READY", "STATUS", "RESTARTS", "AGE")
		if r := kubectlRow(t, out, "NAME", "web-0"); r["READY"] != "0/1" || r["STATUS"] != "Pending" || r["RESTARTS"] != "0" {
			t.Errorf("get pods row = %v", r)
		}

		out = k.ok(t, "get", "configmaps", "-n", ns)
		wantColumns(t, "get configmaps", out, "NAME", "DATA", "AGE")
		if r := kubectlRow(t, out, "NAME", "cfg"); r["DATA"] != "1" {
			t.Errorf("get configmaps row = %v, want DATA 1", r)
		}

		out = k.ok(t, "get", "endpointslices", "-n", ns)
		wantColumns(t, "get endpointslices", out, "NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE")
		if r := kubectlRow(t, out, "NAME", "web-abc"); r["ADDRESSTYPE"] != "IPv4" || r["PORTS"] != "8080" || r["ENDPOINTS"] != "10.244.0.5" {
			t.Errorf("get endpointslices row = %v", r)
		}

		out = k.ok(t, "get", "namespaces")
		wantColumns(t, "get namespaces", out, "NAME", "STATUS", "AGE")
		if r := kubectlRow(t, out, "NAME", ns); r["STATUS"] != "Active" {
			t.Errorf("get namespaces row = %v", r)
		}

		out = k.ok(t, "get", "services", "--all-namespaces")
		wantColumns(t, "get services -A", out, "NAMESPACE", "NAME", "TYPE", "CLUSTER-IP")
		if r := kubectlRow(t, out, "NAME", "kubernetes"); r["NAMESPACE"] != "default" || r["TYPE"] != "ClusterIP" {
			t.Errorf("get services -A: kubernetes row = %v", r)
		}

		out = k.ok(t, "get", "leases", "-n", "kube-node-lease")
		if strings.TrimSpace(out) != "" {
			wantColumns(t, "get leases", out, "NAME", "HOLDER", "AGE")
		}

		out = k.ok(t, "get", "svc", "web", "-n", ns, "-o", "name")
		if strings.TrimSpace(out) != "service/web" {
			t.Errorf("get -o name = %q, want service/web", out)
		}
	})

	t.Run("get nodes -o wide", func(t *testing.T) {
		name := "node-" + suffix
		ip := "192.168.77." + suffix[len(suffix)-2:]
		n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		n.Status.NodeInfo.KubeletVersion = "v1.33.0"
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out := k.ok(t, "get", "nodes", name, "-o", "wide")
		wantColumns(t, "get nodes -o wide", out, "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP")
		r := kubectlRow(t, out, "NAME", name)
		if r["INTERNAL-IP"] != ip || r["STATUS"] != "Ready" || r["ROLES"] != "control-plane" || r["VERSION"] != "v1.33.0" || r["EXTERNAL-IP"] != "<none>" {
			t.Errorf("get nodes -o wide row = %v, want Ready control-plane v1.33.0 %s <none>", r, ip)
		}
		out = k.ok(t, "get", "nodes")
		header, _ := kubectlTable(t, out)
		for _, h := range header {
			if h == "INTERNAL-IP" {
				t.Errorf("get nodes without -o wide shows INTERNAL-IP:\n%s", out)
			}
		}
	})

	t.Run("get -o yaml/json/jsonpath", func(t *testing.T) {
		var fromYAML corev1.Service
		out := k.ok(t, "get", "svc", "web", "-n", ns, "-o", "yaml")
		if err := yaml.UnmarshalStrict([]byte(out), &fromYAML); err != nil {
			t.Fatalf("get -o yaml: %v\n%s", err, out)
		}
		if fromYAML.Kind != "Service" || fromYAML.APIVersion != "v1" || fromYAML.Spec.Type != corev1.ServiceTypeNodePort ||
			fromYAML.Spec.Selector["app"] != "web" || fromYAML.Spec.Ports[0].TargetPort != intstr.FromString("http") || fromYAML.UID != svc.UID {
			t.Errorf("get -o yaml gave %+v", fromYAML)
		}

		var fromJSON corev1.Service
		out = k.ok(t, "get", "svc", "web", "-n", ns, "-o", "json")
		if err := json.Unmarshal([]byte(out), &fromJSON); err != nil {
			t.Fatalf("get -o json: %v\n%s", err, out)
		}
		if fromJSON.Spec.ClusterIP != svc.Spec.ClusterIP || fromJSON.Spec.Ports[0].NodePort != svc.Spec.Ports[0].NodePort || fromJSON.ResourceVersion == "" {
			t.Errorf("get -o json gave clusterIP=%s ports=%+v rv=%q", fromJSON.Spec.ClusterIP, fromJSON.Spec.Ports, fromJSON.ResourceVersion)
		}

		var list corev1.ConfigMapList
		out = k.ok(t, "get", "configmaps", "-n", ns, "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("get configmaps -o json: %v\n%s", err, out)
		}
		if list.Kind != "List" || len(list.Items) != 1 || list.Items[0].Name != "cfg" || list.Items[0].Data["color"] != "green" {
			t.Errorf("get configmaps -o json = %s", out)
		}

		out = k.ok(t, "get", "svc", "web", "-n", ns, "-o", "jsonpath={.spec.clusterIP}")
		if out != svc.Spec.ClusterIP {
			t.Errorf("get -o jsonpath={.spec.clusterIP} = %q, want %q", out, svc.Spec.ClusterIP)
		}
	})

	t.Run("get -w", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out nettest.Buffer
		var errOut nettest.Buffer
		cmd := k.command(wctx, "get", "configmaps", "-n", ns, "-w")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		stop := sync.OnceValue(func() error {
			cancel() // kills the process
			select {
			case err := <-waited:
				return err
			case <-time.After(10 * time.Second):
				return errWatchNoExit
			}
		})
		t.Cleanup(func() { _ = stop() })

		waitOutput := func(what string, within time.Duration, ok func(string) bool) {
			t.Helper()
			deadline := time.Now().Add(within)
			for !ok(out.String()) {
				if time.Now().After(deadline) {
					t.Fatalf("kubectl get -w: %s not seen within %v\nstdout:\n%s\nstderr:\n%s", what, within, out.String(), errOut.String())
				}
				select {
				case err := <-waited:
					t.Fatalf("kubectl get -w exited early (%v) before %s\nstdout:\n%s\nstderr:\n%s", err, what, out.String(), errOut.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		hasLine := func(prefix string) func(string) bool {
			return func(s string) bool {
				for _, l := range strings.Split(s, "\n") {
					if strings.HasPrefix(l, prefix) {
						return true
					}
				}
				return false
			}
		}
		// The initial list comes first; then the watch is (about to be) open.
		waitOutput("the initial list", 10*time.Second, hasLine("cfg "))
		name := "watched-" + suffix
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"a": "1", "b": "2"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitOutput("the created ConfigMap", 5*time.Second, hasLine(name+" "))
		// Each watch event is printed on its own, not aligned with the
		// header: split on blanks.
		for _, l := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				if len(f) != 3 || f[1] != "2" {
					t.Errorf("get -w line for %s = %q, want NAME DATA AGE with DATA 2", name, l)
				}
			}
		}
		if err := stop(); errors.Is(err, errWatchNoExit) {
			t.Error(err)
		}
		if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})

	t.Run("patch", func(t *testing.T) {
		// Strategic merge: containers merge by name, so the port stays.
		out := k.ok(t, "patch", "pod", "web-0", "-n", ns, "-p", `{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}`)
		wantLines(t, "patch (strategic)", out, "pod/web-0 patched")
		pod, err := c.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := pod.Spec.Containers; len(cs) != 1 || cs[0].Image != "nginx:1.28" || len(cs[0].Ports) != 1 || cs[0].Ports[0].Name != "http" {
			t.Errorf("after strategic merge patch containers = %+v", cs)
		}
		out = k.ok(t, "patch", "configmap", "cfg", "-n", ns, "-p", `{"data":{"sm":"1"}}`)
		wantLines(t, "patch (strategic) configmap", out, "configmap/cfg patched")

		out = k.ok(t, "patch", "configmap", "cfg", "-n", ns, "--type", "merge", "-p", `{"metadata":{"labels":{"merged":"yes"}},"data":{"m":"2"}}`)
		wantLines(t, "patch --type merge", out, "configmap/cfg patched")

		out = k.ok(t, "patch", "configmap", "cfg", "-n", ns, "--type", "json", "-p", `[{"op":"add","path":"/data/j","value":"3"},{"op":"remove","path":"/data/sm"}]`)
		wantLines(t, "patch --type json", out, "configmap/cfg patched")

		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cfg", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"color": "green", "m": "2", "j": "3"}
		if fmt.Sprint(cm.Data) != fmt.Sprint(want) || cm.Labels["merged"] != "yes" {
			t.Errorf("after patches: data=%v labels=%v, want data=%v and label merged=yes", cm.Data, cm.Labels, want)
		}

		// A JSON patch whose test fails is refused with a clear error.
		out = k.fails(t, "patch", "configmap", "cfg", "-n", ns, "--type", "json", "-p", `[{"op":"test","path":"/data/color","value":"red"}]`)
		wantContains(t, "failing json patch", out, "invalid")
		if cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cfg", metav1.GetOptions{}); err != nil || cm.Data["color"] != "green" {
			t.Errorf("after a failed json patch: %v, %v", cm.Data, err)
		}
	})

	t.Run("label and annotate", func(t *testing.T) {
		get := func() *corev1.ConfigMap {
			t.Helper()
			cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cfg", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return cm
		}
		wantLines(t, "label", k.ok(t, "label", "configmap", "cfg", "-n", ns, "tier=front"), "configmap/cfg labeled")
		wantContains(t, "label without --overwrite", k.fails(t, "label", "configmap", "cfg", "-n", ns, "tier=back"), "already has a value")
		wantLines(t, "label --overwrite", k.ok(t, "label", "configmap", "cfg", "-n", ns, "tier=back", "--overwrite"), "configmap/cfg labeled")
		if got := get().Labels["tier"]; got != "back" {
			t.Errorf("label tier = %q, want back", got)
		}
		wantLines(t, "label tier-", k.ok(t, "label", "configmap", "cfg", "-n", ns, "tier-"), "configmap/cfg unlabeled")
		if l, ok := get().Labels["tier"]; ok {
			t.Errorf("label tier still set (%q) after tier-", l)
		}

		// kubectl 1.27 says "annotate", later ones "annotated".
		wantContains(t, "annotate", k.ok(t, "annotate", "configmap", "cfg", "-n", ns, "note=x"), "configmap/cfg annotate")
		wantContains(t, "annotate without --overwrite", k.fails(t, "annotate", "configmap", "cfg", "-n", ns, "note=y"), "already has a value")
		wantContains(t, "annotate --overwrite", k.ok(t, "annotate", "configmap", "cfg", "-n", ns, "note=y", "--overwrite"), "configmap/cfg annotate")
		cm := get()
		if cm.Annotations["note"] != "y" {
			t.Errorf("annotation note = %q, want y", cm.Annotations["note"])
		}
		if _, ok := cm.Annotations[corev1.LastAppliedConfigAnnotation]; !ok {
			t.Errorf("last-applied-configuration annotation lost: %v", cm.Annotations)
		}
	})

	t.Run("unsupported", func(t *testing.T) {
		start := time.Now()
		out := k.fails(t, "create", "deployment", "web", "--image=nginx", "-n", ns)
		wantContains(t, "create deployment", out, "deployment")
		if !strings.Contains(out, "could not find the requested resource") {
			t.Errorf("create deployment: want a not-found error, got:\n%s", out)
		}
		out = k.fails(t, "get", "deployments", "-n", ns)
		wantContains(t, "get deployments", out, `the server doesn't have a resource type "deployments"`)

		ssa := filepath.Join(t.TempDir(), "ssa.yaml")
		if err := os.WriteFile(ssa, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: "+ns+"\ndata:\n  a: b\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out = k.fails(t, "apply", "--server-side", "-f", ssa)
		wantContains(t, "apply --server-side", out, "server-side apply is not supported")
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("errors for unsupported requests took %v", d)
		}
	})

	t.Run("delete", func(t *testing.T) {
		wantLines(t, "delete svc/web", k.ok(t, "delete", "svc/web", "-n", ns), `service "web" deleted`)
		if _, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("service after kubectl delete: err=%v, want NotFound", err)
		}
		// The namespace comes first in the file, and deleting it removes its
		// contents, perhaps before kubectl asks for them: hence
		// --ignore-not-found.
		out := k.ok(t, "delete", "-f", manifest, "--ignore-not-found", "--timeout", "15s")
		wantLines(t, "delete -f", out, `namespace "`+ns+`" deleted`)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasSuffix(l, " deleted") {
				t.Errorf("delete -f: unexpected line %q in:\n%s", l, out)
			}
		}
		gone := func(what string, get func() error) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := get()
				if apierrors.IsNotFound(err) {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("%s after kubectl delete -f: err=%v, want NotFound", what, err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		gone("configmap", func() error { _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cfg", metav1.GetOptions{}); return err })
		gone("pod", func() error { _, err := c.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{}); return err })
		gone("endpointslice", func() error {
			_, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-abc", metav1.GetOptions{})
			return err
		})
		gone("namespace", func() error { _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); return err })
		out = k.fails(t, "get", "namespace", ns)
		wantContains(t, "get deleted namespace", out, `namespaces "`+ns+`" not found`)
	})
}
