package protocol

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// CmdArgs is what the runtime passes to one command: the CNI_* variables
// and the network configuration from stdin.
type CmdArgs struct {
	ContainerID string
	Netns       string
	IfName      string
	Args        string
	Path        string
	// NetnsOverride (CNI_NETNS_OVERRIDE) lets CNI_NETNS be the plugin's
	// own namespace.
	NetnsOverride string
	StdinData     []byte
}

// SupportedVersions are the CNI spec versions the plugin speaks, oldest
// first; VERSION reports them.
var SupportedVersions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// latestVersion is the newest supported version, the one VERSION names.
func latestVersion() string { return SupportedVersions[len(SupportedVersions)-1] }

// Supported reports whether the plugin speaks spec version v.
func Supported(v string) bool { return slices.Contains(SupportedVersions, v) }

// VersionAtLeast compares dotted spec versions numerically ("0.10.0" is
// newer than "0.4.0"). A version that does not parse is older than any.
func VersionAtLeast(v, min string) bool {
	a, okA := parseVersion(v)
	b, okB := parseVersion(min)
	if !okA || !okB {
		return false
	}
	return slices.Compare(a[:], b[:]) >= 0
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// ValidName checks the spec's rule for container IDs and network names:
// a letter or digit, then letters, digits, '_', '.' or '-'.
func ValidName(s string) bool {
	if s == "" || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidateIfName checks an interface name the way the kernel and the spec
// do: 1-15 bytes, not "." or "..", no '/', ':' or white space.
func ValidateIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("interface name is empty")
	case len(name) > 15:
		return fmt.Errorf("interface name is too long (at most 15 characters)")
	case name == "." || name == "..":
		return fmt.Errorf("interface name is . or ..")
	case strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) }):
		return fmt.Errorf("interface name contains / or : or whitespace characters")
	}
	return nil
}

// ValidateContainerID checks CNI_CONTAINERID (code 4): it ends up in file
// names.
func ValidateContainerID(id string) error {
	if id == "" {
		return Errorf(CodeBadEnv, "CNI_CONTAINERID is missing")
	}
	if !ValidName(id) {
		return Errorf(CodeBadEnv, "CNI_CONTAINERID %q: invalid characters in containerID", id)
	}
	return nil
}

// ValidateArgs checks what the dispatcher checks of the container ID and
// interface name before running a command, for callers that run a plugin
// in-process: the container ID ends up in file names, the interface name
// in netlink requests.
func ValidateArgs(args *CmdArgs) error {
	if err := ValidateContainerID(args.ContainerID); err != nil {
		return err
	}
	return validateIfNameEnv(args.IfName)
}

func validateIfNameEnv(name string) error {
	if err := ValidateIfName(name); err != nil {
		return Errorf(CodeBadEnv, "CNI_IFNAME %q: %w", name, err)
	}
	return nil
}
