package docs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the module path every pattern below is written against; the
// test checks it against `go list -m`.
const module = "github.com/nodenet/nodenet"

// nn turns module-relative patterns into import-path patterns.
func nn(patterns ...string) []string {
	out := make([]string, len(patterns))
	for i, p := range patterns {
		if p == "..." {
			out[i] = module + "/..."
		} else {
			out[i] = module + "/" + p
		}
	}
	return out
}

// Groups the rules talk about. A pattern is an import path, or a path
// followed by "/..." for the package and everything below it, as in go
// list; "{self}" stands for the importing package.
var (
	// testSupport is code only tests link: it may import anything.
	testSupport = nn("internal/nettest", "internal/testapi", "internal/testbin", "internal/upstream", "internal/kubectltest",
		"internal/iptables/iptablestest", "controllers/internal/queueprobe", "proxy/proxytest/...", "proxy/ipvs/vmtest", "bench/...", "docs")
	// nodeSide is what runs on a node: the daemons and the libraries only
	// they use.
	nodeSide = nn("flanneld/...", "proxy/...", "cni/...", "node/...", "routes/...", "ipam/...", "cmd/nodenet-cni", "cmd/nodenet-shim")
	// components are the programs' own packages, as opposed to libraries.
	components = nn("apiserver/...", "controllers/...", "flanneld/...", "proxy/...", "cni/...", "node/...", "cluster/...")
)

// rule forbids packages matching from (less except) to depend on packages
// matching forbid (less allow), transitively unless direct.
type rule struct {
	name   string
	why    string
	from   []string
	except []string
	forbid []string
	allow  []string
	// direct checks only the importing package's own imports: for standard
	// packages that third-party dependencies import anyway (klog imports
	// flag), where what counts is whether our code uses them.
	direct bool
}

// rules are the dependency rules of docs/ARCHITECTURE.md ("Dependency
// rules"); change both together.
var rules = []rule{
	{
		name: "node side talks to the API through client-go",
		why: "flanneld, the proxy, the CNI plugin, the agent and their libraries run against any Kubernetes API server, " +
			"so they never link the API server or a controller; apiserver/pki is the certificate contract the agent " +
			"and the API server share, a leaf",
		from:   nodeSide,
		except: testSupport,
		forbid: nn("apiserver/...", "controllers/..."),
		allow:  nn("apiserver/pki"),
	},
	{
		name: "controllers talk to the API through client-go",
		why: "a controller reconciles API objects from informers and writes through client-go; it never reaches into " +
			"the API server's storage or handlers, nor runs node-side code",
		from:   nn("controllers/..."),
		forbid: nn("apiserver/...", "flanneld/...", "proxy/...", "cni/...", "node/...", "cluster/..."),
	},
	{
		name:   "the API server knows no component",
		why:    "the API server is the hub every component talks to; it imports none of them",
		from:   nn("apiserver/..."),
		forbid: nn("controllers/...", "flanneld/...", "proxy/...", "cni/...", "node/...", "cluster/...", "routes/..."),
	},
	{
		name: "the CNI plugin sits below flanneld",
		why: "the plugin is exec'd once per pod command and must stay lean; flanneld is its peer that writes " +
			"subnet.env, not its library, so the file format lives where both are its users",
		from:   nn("cni/...", "cmd/nodenet-cni", "ipam/..."),
		forbid: nn("flanneld/..."),
	},
	{
		name: "the CNI plugin binary links only the plugin's packages",
		why: "cmd/nodenet-cni is exec'd per pod command; it links the plugin (cni/), the allocator (ipam/), " +
			"subnet.env's format and internal/ plumbing, nothing of the daemons",
		from:   nn("cmd/nodenet-cni"),
		forbid: nn("..."),
		allow:  nn("cni/...", "ipam/...", "internal/...", "subnetenv"),
	},
	{
		name: "the shim binary links only the shim",
		why: "cmd/nodenet-shim is exec'd for every container and, as the mount stage, every CNI plugin exec; " +
			"node/shim imports only the standard library and x/sys, so it starts in a fraction of nodenet's time",
		from:   nn("cmd/nodenet-shim", "node/shim"),
		forbid: append(nn("..."), "k8s.io/...", "go.etcd.io/..."),
		allow:  nn("node/shim"),
	},
	{
		name: "the echo binary links only the echo server",
		why: "cmd/nodenet-echo is the demo and chaos pods' server, started ten times a second under endpoint churn; " +
			"node/echo imports only the standard library, so a pod starts in milliseconds, not nodenet's ~70 ms",
		from:   nn("cmd/nodenet-echo", "node/echo/..."),
		forbid: append(nn("..."), "k8s.io/...", "go.etcd.io/..."),
		allow:  nn("node/echo/..."),
	},
	{
		name: "only the image builder links the image builder",
		why: "daemonset/image compiles binaries and unpacks Debian packages; the product renders the manifest " +
			"from the daemonset leaf's names and never builds images (bench/kind, a tool beside the product, builds its bench and component images with it)",
		from:   nn("..."),
		except: nn("cmd/nodenet-image", "daemonset/image/...", "bench/kind"),
		forbid: nn("daemonset/image/..."),
	},
	{
		name:   "the CNI protocol layer knows no kernel and no plugin",
		why:    "cni/protocol is the CNI wire format only; the plugin (cni) puts protocol and kernel work together",
		from:   nn("cni/protocol/..."),
		forbid: nn("cni", "cni/kernel/..."),
	},
	{
		name:   "the CNI kernel layer knows no protocol and no plugin",
		why:    "cni/kernel does the rtnetlink work for any caller; the plugin (cni) puts protocol and kernel work together",
		from:   nn("cni/kernel/..."),
		forbid: nn("cni", "cni/protocol/..."),
	},
	{
		name:   "the proxy core imports no data plane",
		why:    "proxy/ is data-plane independent; proxy/app holds the --proxy-mode switch and proxy/proxycmd (the proxy command) hands it the modes",
		from:   nn("proxy"),
		forbid: nn("proxy/..."),
	},
	{
		name:   "a data plane imports the core, never another data plane",
		why:    "each data plane is one proxy.DataPlane, replaceable on its own; proxy/nfwatch is a library they share (nf_tables change notifications), not a data plane",
		from:   nn("proxy/..."),
		except: nn("proxy", "proxy/app", "proxy/proxycmd", "proxy/proxytest/...", "proxy/nfwatch"),
		forbid: nn("proxy/..."),
		allow:  append(nn("proxy", "proxy/nfwatch"), "{self}/..."),
	},
	{
		name:   "the local cluster runs processes, not daemon packages",
		why:    "cluster/ supervises the nodenet binary's subcommands and talks to the API; a test can kill -9 any of them",
		from:   nn("cluster/..."),
		forbid: components,
		allow:  []string{"{self}/..."},
	},
	{
		name: "internal/ libraries know no component",
		why: "internal/ holds the plumbing components share (files, namespaces, versions); it imports only other " +
			"internal libraries, so any component can use it without cycles",
		from:   nn("internal/..."),
		except: testSupport,
		forbid: nn("..."),
		allow:  nn("internal/..."),
	},
	{
		name:   "products never link test support",
		why:    "namespaces, test API servers and test binaries are for tests only",
		from:   nn("..."),
		except: testSupport,
		forbid: testSupport,
	},
	{
		name:   "nothing imports cmd/",
		why:    "cmd/ is where flags are parsed into typed options; libraries take those options and never reach back",
		from:   nn("..."),
		except: nn("cmd/..."),
		forbid: nn("cmd/..."),
	},
	{
		name: "only commands parse flags",
		why: "libraries take typed options; nothing but cmd/ and the command code its binaries share " +
			"(internal/cli, proxy/proxycmd: `nodenet proxy` and nodenet-proxy; node/echo/echocmd: `nodenet echo` and nodenet-echo) reads flags",
		from:   nn("..."),
		except: append(nn("cmd/...", "internal/cli", "proxy/proxycmd", "node/echo/echocmd"), testSupport...),
		forbid: []string{"flag"},
		direct: true,
	},
}

// match reports whether path matches pattern ("p" or "p/...").
func match(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func matchAny(patterns []string, self, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		return match(strings.ReplaceAll(p, "{self}", self), path)
	})
}

func (r rule) applies(pkg string) bool {
	return matchAny(r.from, pkg, pkg) && !matchAny(r.except, pkg, pkg)
}

func (r rule) forbids(self, dep string) bool {
	return matchAny(r.forbid, self, dep) && !matchAny(r.allow, self, dep)
}

// graph is the production import graph: package → its imports.
type graph map[string][]string

// violations returns, for every package of ours the rule applies to, the
// shortest import chain to each forbidden package it reaches. The search
// stops at a forbidden package, so one bad import is reported once, not
// once per package behind it.
func (r rule) violations(g graph, ours []string) [][]string {
	var found [][]string
	for _, pkg := range ours {
		if !r.applies(pkg) {
			continue
		}
		parent := map[string]string{pkg: ""}
		queue := []string{pkg}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, dep := range g[p] {
				if _, seen := parent[dep]; seen {
					continue
				}
				parent[dep] = p
				if r.forbids(pkg, dep) {
					found = append(found, chain(parent, dep))
					continue
				}
				if !r.direct {
					queue = append(queue, dep)
				}
			}
		}
	}
	return found
}

// chain walks parent links back from the end of an import chain.
func chain(parent map[string]string, end string) []string {
	var c []string
	for p := end; p != ""; p = parent[p] {
		c = append(c, p)
	}
	slices.Reverse(c)
	return c
}

func short(path string) string {
	if rel, ok := strings.CutPrefix(path, module+"/"); ok {
		return rel
	}
	return path
}

func describe(r rule, c []string) string {
	parts := make([]string, len(c))
	for i, p := range c {
		parts[i] = short(p)
	}
	return fmt.Sprintf("rule %q broken: %s imports %s (chain %s)\n\twhy the rule: %s",
		r.name, parts[0], parts[len(parts)-1], strings.Join(parts, " → "), r.why)
}

// loadGraph runs `go list -deps -json` over the module: the import graph of
// every package's non-test files, and which packages are the module's.
func loadGraph(t *testing.T) (graph, []string) {
	t.Helper()
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	if got := strings.TrimSpace(string(mod)); got != module {
		t.Fatalf("go list -m = %q, the rules are written for %q", got, module)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,DepOnly,Standard", module+"/...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.Bytes())
	}
	g, ours, err := parseGoList(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	return g, ours
}

func parseGoList(r io.Reader) (graph, []string, error) {
	g := graph{}
	var ours []string
	dec := json.NewDecoder(r)
	for {
		var p struct {
			ImportPath string
			Imports    []string
			DepOnly    bool
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("decode go list output: %w", err)
		}
		g[p.ImportPath] = p.Imports
		if !p.DepOnly {
			ours = append(ours, p.ImportPath)
		}
	}
	if len(ours) == 0 {
		return nil, nil, errors.New("go list listed no package of the module")
	}
	return g, ours, nil
}

// TestDependencyRules enforces the rules table on the real import graph.
func TestDependencyRules(t *testing.T) {
	g, ours := loadGraph(t)
	for _, r := range rules {
		for _, c := range r.violations(g, ours) {
			t.Error(describe(r, c))
		}
	}
}

// TestRulesNameRealPackages: a pattern that matches nothing (a package was
// renamed or moved) would leave its rule silently empty.
func TestRulesNameRealPackages(t *testing.T) {
	g, ours := loadGraph(t)
	all := make([]string, 0, len(g))
	for p := range g {
		all = append(all, p)
	}
	for _, r := range rules {
		for _, set := range []struct {
			field    string
			patterns []string
			among    []string
		}{{"from", r.from, ours}, {"except", r.except, ours}, {"forbid", r.forbid, all}, {"allow", r.allow, all}} {
			for _, p := range set.patterns {
				if strings.Contains(p, "{self}") {
					continue
				}
				if !slices.ContainsFunc(set.among, func(path string) bool { return match(p, path) }) {
					t.Errorf("rule %q: %s pattern %s matches no package", r.name, set.field, p)
				}
			}
		}
	}
}

// TestRuleEngine checks the checker on a made-up graph, so a rule that
// should fire is known to be able to.
func TestRuleEngine(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	g := graph{
		m("node"):              {m("apiserver/pki"), "fmt"},
		m("apiserver/pki"):     {m("internal/atomicfile")},
		m("flanneld"):          {m("routes"), m("internal/glue")},
		m("internal/glue"):     {m("apiserver/storage")},
		m("apiserver/storage"): {m("apiserver/internal/x")},
		m("proxy/iptables"):    {m("proxy"), m("proxy/iptables/rules")},
		m("proxy/nftables"):    {m("proxy"), m("proxy/iptables")},
		m("routes"):            {"github.com/x/klog"},
		"github.com/x/klog":    {"flag"},
	}
	ours := []string{m("node"), m("apiserver/pki"), m("flanneld"), m("internal/glue"), m("apiserver/storage"),
		m("proxy/iptables"), m("proxy/nftables"), m("routes")}
	byName := map[string]rule{}
	for _, r := range rules {
		byName[r.name] = r
	}
	render := func(cs [][]string) []string {
		var out []string
		for _, c := range cs {
			parts := make([]string, len(c))
			for i, p := range c {
				parts[i] = short(p)
			}
			out = append(out, strings.Join(parts, " → "))
		}
		return out
	}
	for _, tc := range []struct {
		rule string
		want []string
	}{
		// pki is allowed, so node is clean; flanneld reaches storage
		// through an internal package, and the chain says so once.
		{"node side talks to the API through client-go", []string{"flanneld → internal/glue → apiserver/storage"}},
		// A data plane's own subpackage is fine, a sibling plane is not.
		{"a data plane imports the core, never another data plane", []string{"proxy/nftables → proxy/iptables"}},
		{"internal/ libraries know no component", []string{"internal/glue → apiserver/storage"}},
		// klog's use of flag is not ours.
		{"only commands parse flags", nil},
	} {
		r, ok := byName[tc.rule]
		if !ok {
			t.Fatalf("no rule %q", tc.rule)
		}
		if got := render(r.violations(g, ours)); !slices.Equal(got, tc.want) {
			t.Errorf("rule %q: violations %q, want %q", tc.rule, got, tc.want)
		}
	}
	g[m("routes")] = append(g[m("routes")], "flag")
	if got := render(byName["only commands parse flags"].violations(g, ours)); !slices.Equal(got, []string{"routes → flag"}) {
		t.Errorf("routes importing flag: violations %q", got)
	}
	msg := describe(byName["node side talks to the API through client-go"], []string{m("flanneld"), m("internal/glue"), m("apiserver/storage")})
	for _, want := range []string{`"node side talks to the API through client-go"`, "flanneld → internal/glue → apiserver/storage", "why the rule:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
