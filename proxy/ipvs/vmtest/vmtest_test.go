package vmtest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestInVM boots the VM with this package's own tests: the guest side
// (TestGuest) checks what the VM promises its users.
func TestInVM(t *testing.T) {
	RunPackage(t, "^TestGuest$", "ip_vs", "dummy", "veth")
}

// TestGuest runs only inside the VM: the modules it asked for are loaded,
// the tools are there and run (their libraries came along).
func TestGuest(t *testing.T) {
	if !InGuest() {
		t.Skip("runs inside the VM (TestInVM)")
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Errorf("ip_vs not loaded: %v", err)
	}
	for _, argv := range [][]string{{"ipvsadm", "-Ln"}, {"ip", "link", "add", "d0", "type", "dummy"}, {"nft", "list", "ruleset"}, {"iptables", "-t", "nat", "-S"}, {"ipset", "list"}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
}

func TestParseDepends(t *testing.T) {
	out := []byte("linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n")
	pkg, rel, err := parseDepends(out)
	if err != nil || pkg != "linux-image-6.1.0-57-amd64" || rel != "6.1.0-57-amd64" {
		t.Fatalf("got %q %q %v", pkg, rel, err)
	}
	if _, _, err := parseDepends([]byte("linux-image-amd64\n")); err == nil {
		t.Fatal("no dependency: want an error")
	}
}

func TestResultParse(t *testing.T) {
	r := &Result{Console: "boot noise\r\n" + startMarker + "\r\n=== RUN TestX\r\nPASS\r\n" + resultMarker + "3\r\nreboot: Power down\r\n"}
	if err := r.parse(); err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 3 || r.Output != "=== RUN TestX\nPASS\n" {
		t.Fatalf("got exit %d output %q", r.ExitCode, r.Output)
	}
	for _, c := range []string{"Kernel panic", startMarker + "\nhalf a test"} {
		if err := (&Result{Console: c}).parse(); err == nil {
			t.Errorf("%q: want an error", c)
		}
	}
}

// TestCPIO has the system's cpio read back what the writer wrote.
func TestCPIO(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("cpio not installed")
	}
	var b bytes.Buffer
	c := newCPIO(&b)
	c.Dir("d")
	c.Bytes("d/f", 0o644, []byte("hello"))
	c.Symlink("d/l", "f")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-it", "--quiet")
	cmd.Stdin = &b
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "d\nd/f\nd/l\n" {
		t.Fatalf("cpio -it: %v\n%s", err, out)
	}
	if quoteAll([]string{"a b", "it's"}) != `'a b' 'it'\''s'` {
		t.Fatal(quoteAll([]string{"a b", "it's"}))
	}
}
