package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvGuest is set (to "1") for the test binary inside the VM: tests that
// need the guest's kernel run only under it.
const EnvGuest = "NODENET_VMTEST"

// InGuest reports whether this process runs inside a vmtest VM.
func InGuest() bool { return os.Getenv(EnvGuest) == "1" }

// Options says what to run in the VM.
type Options struct {
	// Binary is a static executable (CGO_ENABLED=0 go test -c).
	Binary string
	Args   []string
	// Env is added to the binary's environment (EnvGuest=1 always is).
	Env []string
	// Modules are loaded with modprobe before the binary starts.
	Modules []string
	// MemoryMB is the guest's memory (default 512; the initramfs and the
	// binary live in it).
	MemoryMB int
}

// Result is what came back from the VM.
type Result struct {
	// ExitCode is the binary's exit status.
	ExitCode int
	// Output is the binary's output (the serial console from the start
	// marker to the result line).
	Output string
	// Console is everything the serial console printed.
	Console string
	// Elapsed is qemu's start to its exit.
	Elapsed time.Duration
}

// QemuBinary is the emulator Run starts.
const QemuBinary = "qemu-system-x86_64"

// Run boots the kernel with the base initramfs plus an archive holding the
// binary, and returns its exit status and output. An error means the VM
// did not report a result (qemu missing or failing, a panic, ctx done).
func Run(ctx context.Context, k *Kernel, base string, opts Options) (*Result, error) {
	qemu, err := exec.LookPath(QemuBinary)
	if err != nil {
		return nil, fmt.Errorf("vmtest needs qemu-system-x86: %w", err)
	}
	initrd, err := os.CreateTemp("", "vmtest-initrd-")
	if err != nil {
		return nil, fmt.Errorf("vmtest initrd: %w", err)
	}
	defer os.Remove(initrd.Name())
	if err := writeInitrd(initrd, base, opts); err != nil {
		initrd.Close()
		return nil, err
	}
	if err := initrd.Close(); err != nil {
		return nil, fmt.Errorf("vmtest initrd: %w", err)
	}
	mem := opts.MemoryMB
	if mem == 0 {
		mem = 512
	}
	// no_timer_check: under TCG on a loaded host the kernel's check that
	// the 8254 timer ticks through the IO-APIC can miss its window and
	// panic the boot ("IO-APIC + timer doesn't work!"); virtual machines
	// skip it.
	cmd := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-M", "pc", "-cpu", "max", "-smp", "1", "-m", strconv.Itoa(mem),
		"-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", k.Vmlinux(), "-initrd", initrd.Name(),
		"-append", "console=ttyS0 panic=-1 cryptomgr.notests no_timer_check quiet")
	var console bytes.Buffer
	cmd.Stdout = &console
	cmd.Stderr = &console
	start := time.Now()
	err = cmd.Run()
	res := &Result{Console: console.String(), Elapsed: time.Since(start)}
	if perr := res.parse(); perr != nil {
		return res, errors.Join(perr, wrapErr("qemu", err))
	}
	return res, nil
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// parse finds the output and the result line in the console.
func (r *Result) parse() error {
	c := strings.ReplaceAll(r.Console, "\r\n", "\n")
	i := strings.Index(c, startMarker+"\n")
	if i < 0 {
		return fmt.Errorf("the VM never started the test (no %s on the console):\n%s", startMarker, tail(c))
	}
	body := c[i+len(startMarker)+1:]
	j := strings.LastIndex(body, resultMarker)
	if j < 0 {
		return fmt.Errorf("the VM reported no result (no %s on the console):\n%s", resultMarker, tail(c))
	}
	r.Output = body[:j]
	code, _, _ := strings.Cut(body[j+len(resultMarker):], "\n")
	n, err := strconv.Atoi(strings.TrimSpace(code))
	if err != nil {
		return fmt.Errorf("malformed result line %q", resultMarker+code)
	}
	r.ExitCode = n
	return nil
}

func tail(s string) string {
	const max = 4000
	if len(s) > max {
		return "..." + s[len(s)-max:]
	}
	return s
}

// writeInitrd writes the base archive followed by one holding the binary
// and its run script; the kernel unpacks both.
func writeInitrd(w io.Writer, base string, opts Options) error {
	b, err := os.Open(base)
	if err != nil {
		return fmt.Errorf("vmtest initrd: %w", err)
	}
	defer b.Close()
	if _, err := io.Copy(w, b); err != nil {
		return fmt.Errorf("vmtest initrd: %w", err)
	}
	c := newCPIO(w)
	c.File("vmtest/test", opts.Binary)
	c.Bytes("vmtest/run.sh", 0o755, []byte(runScript(opts)))
	return c.Close()
}

// runScript loads the modules and runs the binary with its arguments and
// environment, each shell-quoted.
func runScript(opts Options) string {
	var s strings.Builder
	if len(opts.Modules) > 0 {
		s.WriteString("modprobe -a " + quoteAll(opts.Modules) + " || exit 97\n")
	}
	s.WriteString("exec env " + EnvGuest + "=1 " + quoteAll(opts.Env) + " ./test " + quoteAll(opts.Args) + "\n")
	return s.String()
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// BuildTest compiles the test binary of the package in dir, static (the
// guest has no Go toolchain and only the libraries of its tools), into
// outDir.
func BuildTest(ctx context.Context, dir, outDir string) (string, error) {
	out := filepath.Join(outDir, "vm.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c in %s: %w\n%s", dir, err, b)
	}
	return out, nil
}
