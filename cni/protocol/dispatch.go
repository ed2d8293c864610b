package protocol

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Plugin is what a CNI plugin does; Main runs one of its commands.
type Plugin interface {
	// DecodeConf decodes a network configuration the way the plugin's
	// commands will (decoding only, no validation) and returns the keys
	// every configuration has. Main calls it before any command, so a
	// configuration the plugin cannot read fails as such (code 6)
	// whatever else is wrong with it.
	DecodeConf(stdin []byte) (*NetConf, error)
	// Add implements ADD and returns the result in the configuration's
	// version.
	Add(ctx context.Context, args *CmdArgs) (*Result, error)
	Check(ctx context.Context, args *CmdArgs) error
	Del(ctx context.Context, args *CmdArgs) error
	GC(ctx context.Context, args *CmdArgs) error
	Status(ctx context.Context, args *CmdArgs) error
}

// Main runs one CNI command of p the way a runtime invokes a plugin
// binary: the CNI_* variables come from getenv, the configuration from
// stdin; the result (ADD), the version information (VERSION) or an error
// object goes to stdout. It returns the exit status: 0, or 1 after an
// error object. Without CNI_COMMAND it prints about and the supported
// versions to stderr, for a person who ran the binary by hand.
func Main(ctx context.Context, p Plugin, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, about string) int {
	cmd := getenv("CNI_COMMAND")
	if cmd == "" {
		fmt.Fprintf(stderr, "%s\nCNI protocol versions supported: %s\n", about, strings.Join(SupportedVersions, ", "))
		return 0
	}
	out, err := dispatch(ctx, p, cmd, getenv, stdin)
	if err != nil {
		out = AsWireError(err).appendJSON(nil)
	}
	if len(out) > 0 {
		stdout.Write(out)
	}
	if err != nil {
		return 1
	}
	return 0
}

// dispatch runs cmd and returns what goes to stdout on success.
func dispatch(ctx context.Context, p Plugin, cmd string, getenv func(string) string, stdin io.Reader) ([]byte, error) {
	args, err := argsFromEnv(cmd, getenv)
	if err != nil {
		return nil, err
	}
	if cmd == "VERSION" {
		return versionInfo(), nil
	}
	if args.StdinData, err = io.ReadAll(stdin); err != nil {
		return nil, Errorf(CodeIO, "error reading from stdin: %w", err)
	}
	confVersion, err := checkConfig(p, args.StdinData)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(cmd, confVersion); err != nil {
		return nil, err
	}
	if cmd == "ADD" || cmd == "DEL" {
		if err := checkNotOwnNetNS(args); err != nil {
			return nil, err
		}
	}
	switch cmd {
	case "ADD":
		res, err := p.Add(ctx, args)
		if err != nil {
			return nil, err
		}
		return res.MarshalJSON()
	case "DEL":
		return nil, p.Del(ctx, args)
	case "CHECK":
		return nil, p.Check(ctx, args)
	case "GC":
		return nil, p.GC(ctx, args)
	default: // STATUS
		return nil, p.Status(ctx, args)
	}
}

// envVar is a CNI_* variable: the commands that require it, and whether
// it is validated as a container ID or an interface name when required.
type envVar struct {
	name     string
	field    func(*CmdArgs) *string
	required []string
	validate func(string) error
}

var envVars = []envVar{
	{"CNI_CONTAINERID", func(a *CmdArgs) *string { return &a.ContainerID }, []string{"ADD", "CHECK", "DEL"}, ValidateContainerID},
	{"CNI_NETNS", func(a *CmdArgs) *string { return &a.Netns }, []string{"ADD", "CHECK"}, nil},
	{"CNI_IFNAME", func(a *CmdArgs) *string { return &a.IfName }, []string{"ADD", "CHECK", "DEL"}, validateIfNameEnv},
	{"CNI_ARGS", func(a *CmdArgs) *string { return &a.Args }, nil, nil},
	{"CNI_PATH", func(a *CmdArgs) *string { return &a.Path }, []string{"ADD", "CHECK", "DEL", "GC", "STATUS"}, nil},
	{"CNI_NETNS_OVERRIDE", func(a *CmdArgs) *string { return &a.NetnsOverride }, nil, nil},
}

// knownCommands are the commands argsFromEnv knows; VERSION needs no
// variable, and an unknown command is reported once the configuration has
// been read, as the reference skeleton does.
var knownCommands = []string{"ADD", "CHECK", "DEL", "GC", "STATUS", "VERSION"}

// argsFromEnv reads the CNI_* variables for cmd: a missing required one
// is code 4 naming all that are missing, an invalid one code 4 too.
func argsFromEnv(cmd string, getenv func(string) string) (*CmdArgs, error) {
	args := &CmdArgs{}
	var missing []string
	for _, v := range envVars {
		val := getenv(v.name)
		*v.field(args) = val
		required := slices.Contains(v.required, cmd)
		switch {
		case val == "" && required:
			missing = append(missing, v.name)
		case val != "" && required && v.validate != nil:
			if err := v.validate(val); err != nil {
				return nil, err
			}
		}
	}
	if len(missing) > 0 {
		return nil, Errorf(CodeBadEnv, "required env variables [%s] missing", strings.Join(missing, ","))
	}
	return args, nil
}

// versionInfo is VERSION's answer.
func versionInfo() []byte {
	b := appendString([]byte(`{"cniVersion":`), latestVersion())
	b = appendListField(b, "supportedVersions", SupportedVersions, appendString)
	return append(b, "}\n"...)
}

// checkConfig checks what every command needs of the configuration before
// it runs — that the plugin can decode it (code 6) and a valid network
// name (code 7) — and returns its cniVersion ("0.1.0" when missing, as
// the spec's oldest).
func checkConfig(p Plugin, stdin []byte) (string, error) {
	c, err := p.DecodeConf(stdin)
	if err != nil {
		return "", Errorf(CodeDecode, "error unmarshall network config: %w", err)
	}
	if c.Name == "" {
		return "", Errorf(CodeInvalidConfig, "missing network name")
	}
	if !ValidName(c.Name) {
		return "", Errorf(CodeInvalidConfig, "invalid characters found in network name %q", c.Name)
	}
	if c.CNIVersion == "" {
		return "0.1.0", nil
	}
	return c.CNIVersion, nil
}

// checkVersion checks that the configuration's version allows cmd (CHECK
// exists from 0.4.0 on, GC and STATUS from 1.1.0) and that the plugin
// speaks it; an unknown command is code 4.
func checkVersion(cmd, confVersion string) error {
	if !slices.Contains(knownCommands, cmd) {
		return Errorf(CodeBadEnv, "unknown CNI_COMMAND: %s", cmd)
	}
	since := map[string]string{"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}[cmd]
	if since != "" && !VersionAtLeast(confVersion, since) {
		return Errorf(CodeIncompatibleVersion, "config version does not allow %s", cmd)
	}
	if !Supported(confVersion) {
		return &Error{Code: CodeIncompatibleVersion, Err: fmt.Errorf("incompatible CNI versions: config is %q, plugin supports %v", confVersion, SupportedVersions)}
	}
	return nil
}

// checkNotOwnNetNS refuses a CNI_NETNS that is the plugin's own namespace
// (the node's): ADD would configure the node as a pod. CNI_NETNS_OVERRIDE
// allows it, as in the reference skeleton.
func checkNotOwnNetNS(args *CmdArgs) error {
	if o := strings.ToUpper(args.NetnsOverride); o == "TRUE" || o == "1" || args.Netns == "" {
		return nil
	}
	if sameNetNS(args.Netns) {
		return Errorf(CodeInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same")
	}
	return nil
}

// sameNetNS reports whether path is the calling thread's own network
// namespace, which a runtime must never hand a plugin as the pod's.
func sameNetNS(path string) bool {
	var pod, self unix.Stat_t
	if unix.Stat(path, &pod) != nil || unix.Stat("/proc/thread-self/ns/net", &self) != nil {
		return false
	}
	return pod.Dev == self.Dev && pod.Ino == self.Ino
}
