package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodenet/nodenet/internal/cidrlist"
)

// StringList is a repeatable, comma-separable flag (--etcd-servers a,b).
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

func (l *StringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// LogFlags adds --log-level and --log-format and builds the logger.
type LogFlags struct {
	level  string
	format string
}

func (l *LogFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// Logger builds the subcommand's logger on stderr and makes it klog's too.
func (l *LogFlags) Logger(component string) (*slog.Logger, error) {
	return l.LoggerTo(os.Stderr, component)
}

func (l *LogFlags) LoggerTo(w io.Writer, component string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch l.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", l.format)
	}
	log := slog.New(h).With("component", component)
	RouteKlog(log)
	return log, nil
}

// RouteKlog sends klog — what client-go (informers, leader election, the
// API's warnings) logs through — into log, so --log-format and --log-level
// cover those lines too instead of klog writing its own format to stderr.
// klog.Error* becomes ERROR and klog.Info* INFO; klog.Warning* is INFO as
// well, because logr, klog's bridge, knows only info and error. klog's own
// verbosity (0) still drops klog.V(n) lines with n > 0, while contextual
// loggers' V(n) map to slog level -n (V(4) is DEBUG).
func RouteKlog(log *slog.Logger) {
	klog.SetSlogLogger(log)
}

// CIDRsFlag is a CIDR-list flag (comma-separated, repeatable) parsed into
// *dst and checked against its rule as each value is set, so a bad list
// fails flag parsing with an error that names the flag. Every CIDR-list
// flag of every subcommand goes through it: one syntax, one set of rules.
type CIDRsFlag struct {
	dst  *[]netip.Prefix
	rule cidrlist.Rule
	raw  []string // values set so far
}

func NewCIDRsFlag(dst *[]netip.Prefix, rule cidrlist.Rule) *CIDRsFlag {
	return &CIDRsFlag{dst: dst, rule: rule}
}

func (f *CIDRsFlag) String() string {
	if f == nil || f.dst == nil {
		return "" // the flag package asks a zero value for its default
	}
	return cidrlist.Join(*f.dst)
}

// Set adds one value. The rule applies to the whole list, so
// "--cluster-cidr 10.244.0.0/16 --cluster-cidr 10.245.0.0/16" fails like
// "--cluster-cidr 10.244.0.0/16,10.245.0.0/16".
func (f *CIDRsFlag) Set(v string) error {
	raw := append(slices.Clip(f.raw), v)
	ps, err := cidrlist.Parse(raw, f.rule)
	if err != nil {
		return err
	}
	f.raw, *f.dst = raw, ps
	return nil
}
