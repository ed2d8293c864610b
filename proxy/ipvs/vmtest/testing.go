package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
)

// Timeout bounds one VM test run (boot, modules, the tests, power-off):
// TCG on a loaded 2-core machine is slow.
const Timeout = 10 * time.Minute

// BuildTimeout bounds preparing it: a cold cache downloads the kernel and
// builds the static test binary, whose dependencies (CGO_ENABLED=0) are
// compiled apart from the host's.
const BuildTimeout = 15 * time.Minute

// RunPackage is the host side of a package's VM tests: it builds the
// package's test binary (the package in the working directory, which go
// test sets to the package's), boots it with run as -test.run and fails t
// unless it passes. It gates (skip, or fail under NODENET_PRIVILEGED) on
// qemu, busybox and apt being there, and skips inside the guest.
func RunPackage(t *testing.T, run string, modules ...string) *Result {
	t.Helper()
	return RunPackageSkipping(t, run, "", modules...)
}

// RunPackageSkipping is RunPackage with skip as -test.skip.
func RunPackageSkipping(t *testing.T, run, skip string, modules ...string) *Result {
	t.Helper()
	args := []string{"-test.run", run, "-test.v", "-test.count=1"}
	if skip != "" {
		args = append(args, "-test.skip", skip)
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	return RunPackageArgs(t, Package{Args: args, Modules: modules, Timeout: Timeout})
}

// Package is what RunPackageArgs runs in the VM.
type Package struct {
	// Args are the test binary's arguments (-test.run, -test.bench …).
	Args []string
	// Modules are loaded before the binary starts.
	Modules []string
	// Timeout bounds the VM's run (boot to power-off).
	Timeout time.Duration
	// MemoryMB is the guest's memory (default 1024).
	MemoryMB int
}

// RunPackageArgs is RunPackage for any test binary arguments (a benchmark
// run, say): the gates, the build and the boot are the same. tb fails
// unless the binary exits 0.
func RunPackageArgs(tb testing.TB, pkg Package) *Result {
	tb.Helper()
	if InGuest() {
		tb.Skip("vmtest: already inside the VM")
	}
	for _, tool := range []string{QemuBinary, "busybox", "apt-get", "dpkg", "xz", "ipvsadm"} {
		if _, err := exec.LookPath(tool); err != nil {
			nettest.Require(tb, fmt.Errorf("vmtest needs %s (apt-get install qemu-system-x86 busybox-static ipvsadm xz-utils): %w", tool, err))
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	prep := time.Now()
	k, err := FetchKernel(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	base, err := BaseInitramfs(ctx, k)
	if err != nil {
		tb.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	bin, err := BuildTest(ctx, wd, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("vmtest: kernel %s, initramfs and test binary ready in %v", k.Package, time.Since(prep).Round(time.Millisecond))
	// The shared suites wait longer for a sync under TCG (a loaded
	// 2-core host ran them 3-5 times slower than 10 s allowed).
	env := []string{nettest.EnvPrivileged + "=1", "NODENET_TEST_WAIT=60s"}
	// The guest's tests log (testapi.Logger) when the host's were asked to.
	if v := os.Getenv("NODENET_TEST_LOG"); v != "" {
		env = append(env, "NODENET_TEST_LOG="+v)
	}
	mem := pkg.MemoryMB
	if mem == 0 {
		mem = 1024
	}
	ctx, cancel = context.WithTimeout(context.Background(), pkg.Timeout)
	defer cancel()
	res, err := Run(ctx, k, base, Options{Binary: bin, Args: pkg.Args, Modules: pkg.Modules, Env: env, MemoryMB: mem})
	if err != nil {
		tb.Fatalf("vmtest: %v", err)
	}
	tb.Logf("vmtest: VM ran for %v, exit %d; output:\n%s", res.Elapsed.Round(time.Millisecond), res.ExitCode, res.Output)
	if res.ExitCode != 0 {
		tb.Fatalf("vmtest: the tests inside the VM failed (exit %d)", res.ExitCode)
	}
	return res
}
