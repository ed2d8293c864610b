package image

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/internal/atomicfile"
	"github.com/nodenet/nodenet/internal/version"
)

// DefaultRef is the name the image is built and loaded as.
const DefaultRef = daemonset.DefaultImage

// Userland is the Debian packages whose programs the daemons exec: both
// iptables backends (iptables-nft, iptables-legacy and their -save and
// -restore) and nft. Their libraries come in as dependencies.
var Userland = []string{"iptables", "nftables"}

// Binary paths inside the image.
const (
	NodenetPath      = daemonset.NodenetPath
	NodenetCNIPath   = daemonset.NodenetCNIPath
	NodenetProxyPath = daemonset.NodenetProxyPath
)

// BuildOptions say where the sources and caches are.
type BuildOptions struct {
	RepoDir  string // the nodenet module's root
	Out      string // the image tar to write
	Ref      string // name:tag; DefaultRef if empty
	CacheDir string // where downloaded .debs are kept
	Go       string // go command; "go" if empty
	Log      *slog.Logger
}

// Built is what Build produced.
type Built struct {
	Written
	Packages []DebPackage
}

// Build compiles nodenet, nodenet-proxy and nodenet-cni statically, takes the userland
// from Debian packages and writes the image to opts.Out.
func Build(ctx context.Context, opts BuildOptions) (Built, error) {
	if opts.Ref == "" {
		opts.Ref = DefaultRef
	}
	if opts.Go == "" {
		opts.Go = "go"
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if err := validRef(opts.Ref); err != nil {
		return Built{}, err
	}
	tmp, err := os.MkdirTemp("", "nodenet-image-")
	if err != nil {
		return Built{}, err
	}
	defer os.RemoveAll(tmp)

	bins := NewLayer()
	for _, b := range []struct{ pkg, path string }{{"./cmd/nodenet", NodenetPath}, {"./cmd/nodenet-proxy", NodenetProxyPath}, {"./cmd/nodenet-cni", NodenetCNIPath}} {
		out := filepath.Join(tmp, filepath.Base(b.path))
		if err := goBuild(ctx, opts, b.pkg, out); err != nil {
			return Built{}, err
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return Built{}, err
		}
		if err := bins.Add(Entry{Path: b.path, Mode: 0o755, Data: data}); err != nil {
			return Built{}, err
		}
	}

	base, pkgs, err := UserlandLayer(ctx, opts.CacheDir, opts.Log)
	if err != nil {
		return Built{}, err
	}

	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name+"="+p.Version)
	}
	img := Image{
		Ref:          opts.Ref,
		Architecture: runtime.GOARCH,
		Layers:       []*Layer{base, bins},
		LayerComments: []string{
			"Debian userland: " + strings.Join(names, " "),
			"nodenet, nodenet-proxy and nodenet-cni (static)",
		},
		Config: Config{
			Entrypoint: []string{NodenetPath},
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			WorkingDir: "/",
			Labels: map[string]string{
				"org.opencontainers.image.title":       "nodenet",
				"org.opencontainers.image.description": "nodenet node daemons: flanneld, proxy, CNI plugin",
				"org.opencontainers.image.version":     version.GitVersion,
			},
		},
	}
	var buf bytes.Buffer
	w, err := Write(&buf, img)
	if err != nil {
		return Built{}, err
	}
	if err := atomicfile.Write(opts.Out, buf.Bytes(), 0o644); err != nil {
		return Built{}, fmt.Errorf("write %s: %w", opts.Out, err)
	}
	return Built{Written: w, Packages: pkgs}, nil
}

// UserlandLayer is the image's base layer: the Userland packages, any
// extra ones, and their dependencies from Debian (.debs kept in cacheDir),
// unpacked, plus what their maintainer scripts would have added
// (addSystem). Other images whose daemons exec iptables or nft (the kind
// benchmark's upstream flannel and kube-proxy images) are built on the
// same layer.
func UserlandLayer(ctx context.Context, cacheDir string, log *slog.Logger, extra ...string) (*Layer, []DebPackage, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pkgs, err := ResolveDebs(ctx, append(append([]string(nil), Userland...), extra...))
	if err != nil {
		return nil, nil, fmt.Errorf("resolve Debian packages: %w", err)
	}
	debs, err := FetchDebs(ctx, pkgs, cacheDir, log)
	if err != nil {
		return nil, nil, err
	}
	base := NewLayer()
	for _, d := range debs {
		if err := AddDeb(ctx, base, d); err != nil {
			return nil, nil, err
		}
	}
	if err := addSystem(base); err != nil {
		return nil, nil, err
	}
	return base, pkgs, nil
}

// goBuild builds a static, reproducible binary: no cgo, no file system
// paths and no build ID in it, so the same commit gives the same bytes.
func goBuild(ctx context.Context, opts BuildOptions, pkg, out string) error {
	cmd := exec.CommandContext(ctx, opts.Go, "build", "-trimpath", "-ldflags=-buildid=", "-o", out, pkg)
	cmd.Dir = opts.RepoDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, bytes.TrimSpace(b))
	}
	return nil
}

// addSystem adds what a package's maintainer scripts or a base system
// would: the default iptables backend links (Debian's update-alternatives
// picks nft; the daemons detect the host's backend and call
// iptables-nft or iptables-legacy themselves) and the directories a
// container expects.
func addSystem(l *Layer) error {
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if err := l.Add(Entry{Path: "usr/sbin/" + name, Link: "xtables-nft-multi"}); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"tmp", 0o777 | os.ModeSticky}, {"run", 0o755}, {"var/lib", 0o755}, {"etc", 0o755}} {
		if err := l.Add(Entry{Path: d.path, Mode: d.mode, Dir: true}); err != nil {
			return err
		}
	}
	return nil
}
