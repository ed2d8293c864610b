//go:build linux

package nettest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// EnvPrivileged names the variable CI sets for the privileged tier. When it
// is set, a missing privilege or tool fails the test instead of skipping it.
const EnvPrivileged = "NODENET_PRIVILEGED"

// Capability bits from linux/capability.h.
const (
	capNetAdmin = 12
	capSysAdmin = 21 // unshare(CLONE_NEWNET) and the bind mount need it
)

type action int

const (
	run action = iota
	skip
	fail
)

func (a action) String() string {
	switch a {
	case run:
		return "run"
	case skip:
		return "skip"
	case fail:
		return "fail"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// decide is the whole gate policy, kept pure so it can be table-tested: a
// satisfied requirement runs, an unsatisfied one skips, unless strict mode
// says the environment promised it would be satisfied.
func decide(satisfied, strict bool) action {
	switch {
	case satisfied:
		return run
	case strict:
		return fail
	default:
		return skip
	}
}

// strictFromEnv treats anything other than empty or an explicit false as
// strict, so a typo in CI ("yes", "on") cannot quietly turn failures into
// skips.
func strictFromEnv(v string) bool {
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

func strict() bool { return strictFromEnv(os.Getenv(EnvPrivileged)) }

// gate applies decide to problem (nil means the requirement holds).
func gate(t testing.TB, problem error, strict bool) {
	t.Helper()
	switch decide(problem == nil, strict) {
	case skip:
		t.Skipf("nettest: %v (set %s=1 to make this a failure)", problem, EnvPrivileged)
	case fail:
		t.Fatalf("nettest: %v, but %s is set so the privileged tier must not skip", problem, EnvPrivileged)
	}
}

// Require gates on any requirement: problem nil runs, otherwise the test
// skips with problem as the reason, or fails under NODENET_PRIVILEGED.
func Require(t testing.TB, problem error) {
	t.Helper()
	gate(t, problem, strict())
}

// RequirePrivileged skips (or, under NODENET_PRIVILEGED, fails) unless the
// process can create and mount network namespaces. New calls it, so tests
// that use New need not.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	gate(t, privilegeProblem(), strict())
}

// RequireTool gates on an executable being in PATH and returns its path.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		gate(t, fmt.Errorf("tool %s not found: %w", name, err), strict())
		return ""
	}
	return p
}

// RequireSysfs gates on a kernel feature that announces itself with a path,
// e.g. /sys/module/vxlan or /proc/sys/net/ipv4/conf/all/rp_filter.
func RequireSysfs(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		gate(t, fmt.Errorf("kernel feature missing: %w", err), strict())
	}
}

// privilegeProblem is computed once per binary: the answer cannot change,
// and the probe creates a real namespace.
var privilegeProblem = sync.OnceValue(func() error {
	capEff, err := readCapEff("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read effective capabilities: %w", err)
	}
	var missing []string
	if capEff&(1<<capNetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if capEff&(1<<capSysAdmin) == 0 {
		missing = append(missing, "CAP_SYS_ADMIN")
	}
	if len(missing) > 0 {
		return fmt.Errorf("not privileged (euid %d, missing %s)", os.Geteuid(), strings.Join(missing, ", "))
	}
	// Capabilities are not enough inside some containers (seccomp, read-only
	// /run), so prove the real operation works.
	ns, err := create()
	if err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	if err := ns.destroy(); err != nil {
		return fmt.Errorf("cannot remove a network namespace: %w", err)
	}
	return nil
})

func readCapEff(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseCapEff(f)
}

func parseCapEff(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("parse CapEff %q: %w", v, err)
		}
		return caps, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapEff line")
}
