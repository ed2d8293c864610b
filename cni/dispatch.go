package cni

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Main runs one CNI command the way a runtime invokes the binary: the
// CNI_* variables come from getenv, the configuration from stdin; the
// result (ADD), the version information (VERSION) or an error object goes
// to stdout. It returns the exit status: 0, or 1 after an error object.
// Without CNI_COMMAND it prints about and the supported versions to
// stderr, for a person who ran the binary by hand.
func (p *Plugin) Main(ctx context.Context, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, about string) int {
	cmd := getenv("CNI_COMMAND")
	if cmd == "" {
		fmt.Fprintf(stderr, "%s\nCNI protocol versions supported: %s\n", about, strings.Join(SupportedVersions, ", "))
		return 0
	}
	out, err := p.dispatch(ctx, cmd, getenv, stdin)
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
func (p *Plugin) dispatch(ctx context.Context, cmd string, getenv func(string) string, stdin io.Reader) ([]byte, error) {
	args, err := argsFromEnv(cmd, getenv)
	if err != nil {
		return nil, err
	}
	if cmd == "VERSION" {
		return versionInfo(), nil
	}
	if args.StdinData, err = io.ReadAll(stdin); err != nil {
		return nil, errorf(CodeIO, "error reading from stdin: %w", err)
	}
	confVersion, err := checkConfig(args.StdinData)
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
	{"CNI_CONTAINERID", func(a *CmdArgs) *string { return &a.ContainerID }, []string{"ADD", "CHECK", "DEL"}, validateContainerID},
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
		return nil, errorf(CodeBadEnv, "required env variables [%s] missing", strings.Join(missing, ","))
	}
	return args, nil
}

func validateIfNameEnv(name string) error {
	if err := validateIfName(name); err != nil {
		return errorf(CodeBadEnv, "CNI_IFNAME %q: %w", name, err)
	}
	return nil
}

// versionInfo is VERSION's answer.
func versionInfo() []byte {
	b := appendString([]byte(`{"cniVersion":`), latestVersion())
	b = appendListField(b, "supportedVersions", SupportedVersions, appendString)
	return append(b, "}\n"...)
}

// checkConfig checks what every command needs of the configuration before
// it runs — valid JSON (code 6) and a valid network name (code 7) — and
// returns its cniVersion ("0.1.0" when missing, as the spec's oldest).
func checkConfig(stdin []byte) (string, error) {
	var c NetConf
	if err := decodeConf(stdin, &c); err != nil {
		return "", errorf(CodeDecode, "error unmarshall network config: %w", err)
	}
	if c.Name == "" {
		return "", errorf(CodeInvalidConfig, "missing network name")
	}
	if !validName(c.Name) {
		return "", errorf(CodeInvalidConfig, "invalid characters found in network name %q", c.Name)
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
		return errorf(CodeBadEnv, "unknown CNI_COMMAND: %s", cmd)
	}
	since := map[string]string{"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}[cmd]
	if since != "" && !versionAtLeast(confVersion, since) {
		return errorf(CodeIncompatibleVersion, "config version does not allow %s", cmd)
	}
	if !supported(confVersion) {
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
		return errorf(CodeInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same")
	}
	return nil
}
