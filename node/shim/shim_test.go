package shim

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCRILine(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	if got := string(CRILine(at, "stderr", false, []byte("half a line"))); got != "2026-01-02T02:04:05.0000006Z stderr P half a line\n" {
		t.Errorf("CRI line %q", got)
	}
}

func TestCopyLinesSplitsLongLines(t *testing.T) {
	long := strings.Repeat("x", maxLogLine+10)
	var got []string
	copyLines(strings.NewReader("one\n"+long+"\n\nno newline"), func(full bool, b []byte) {
		tag := "P"
		if full {
			tag = "F"
		}
		got = append(got, tag+":"+string(b))
	})
	want := []string{"F:one", "P:" + long[:maxLogLine], "F:" + long[maxLogLine:], "F:", "P:no newline"}
	if !slices.Equal(got, want) {
		t.Errorf("records %d: %.80q…, want %d", len(got), got, len(want))
	}
}

func TestArgsRoundTrip(t *testing.T) {
	for _, o := range []Options{
		{Log: "/l/0.log", Argv: []string{"/bin/echo", "--", "--log"}},
		{Log: "/l/0.log", Mounts: []Mount{{Source: "/a", Target: "/b", ReadOnly: true}, {Source: "/c d", Target: "/e"}}, Argv: []string{"x"}},
		{Exec: true, Mounts: []Mount{{Source: "/a", Target: "/b"}}, Argv: []string{"/opt/cni/bin/portmap"}},
		{Exec: true, Argv: []string{"/bin/true"}},
	} {
		args, err := o.Args()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseArgs(args)
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		if got.Log != o.Log || got.Exec != o.Exec || !slices.Equal(got.Mounts, o.Mounts) || !slices.Equal(got.Argv, o.Argv) {
			t.Errorf("%q parsed as %+v, want %+v", args, got, o)
		}
	}
	for _, bad := range [][]string{
		nil,
		{"--log", "/l"},              // no --
		{"--log", "/l", "--"},        // no command
		{"--", "/bin/true"},          // neither --log nor --exec
		{"--mounts", "{", "--", "x"}, // not JSON
		{"--verbose", "--", "x"},     // unknown
		{"--exec", "--log"},          // --log without its value
	} {
		if o, err := ParseArgs(bad); err == nil {
			t.Errorf("%q parsed as %+v, want an error", bad, o)
		}
	}
	if code := Main([]string{"/nonexistent"}, []string{"--", "x"}); code != 2 {
		t.Errorf("Main with a bad command line: exit %d, want 2", code)
	}
}

func TestExecStage(t *testing.T) {
	got, err := ExecStage([]string{"/bin/nodenet", "logshim"}, []Mount{{Source: "/s", Target: "/t"}}, []string{"/p", "a"})
	want := []string{"/bin/nodenet", "logshim", "--exec", "--mounts", `[{"source":"/s","target":"/t"}]`, "--", "/p", "a"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("exec stage %q, %v; want %q", got, err, want)
	}
	if _, err := ExecStage(nil, nil, []string{"/p"}); err == nil {
		t.Error("exec stage without a shim: no error")
	}
}

// RunLogShim without mounts runs the command itself (no second stage):
// its output becomes CRI lines and its exit code or signal the shim's.
func TestRunLogShim(t *testing.T) {
	log := filepath.Join(t.TempDir(), "0.log")
	code := RunLogShim(nil, log, nil, []string{"/bin/sh", "-c", "echo out; echo err >&2; printf tail; exit 3"})
	if code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	slices.Sort(lines) // stdout and stderr are copied concurrently
	re := regexp.MustCompile(`^\S+Z (stdout|stderr) [FP] (.*)$`)
	var got []string
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a CRI line: %q", l)
		}
		got = append(got, m[1]+" "+m[2])
	}
	slices.Sort(got)
	if want := []string{"stderr err", "stdout out", "stdout tail"}; !slices.Equal(got, want) {
		t.Errorf("log records %q, want %q", got, want)
	}
	if code := RunLogShim(nil, log, nil, []string{"/bin/sh", "-c", "kill -TERM $$"}); code != 128+15 {
		t.Errorf("killed command: exit %d, want 143", code)
	}
	if code := RunLogShim(nil, log, nil, []string{filepath.Join(t.TempDir(), "missing")}); code != 127 {
		t.Errorf("missing command: exit %d, want 127", code)
	}
	// With mounts but no binary to run the second stage through.
	if code := RunLogShim(nil, log, []Mount{{Source: "/", Target: "/mnt"}}, []string{"/bin/true"}); code != 127 {
		t.Errorf("mounts without a shim binary: exit %d, want 127", code)
	}
}
