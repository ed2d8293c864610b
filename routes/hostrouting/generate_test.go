package hostrouting

import (
	"testing"

	"github.com/nodenet/nodenet/internal/bpfgen"
	"github.com/nodenet/nodenet/internal/nettest"
)

// TestGeneratedObjectIsFresh: the committed bpf2go output is what
// bpf/hostrouting.c generates (needs clang, llvm-strip and libbpf-dev; CI
// installs them).
func TestGeneratedObjectIsFresh(t *testing.T) {
	nettest.RequireTool(t, "clang")
	nettest.RequireTool(t, "llvm-strip")
	nettest.RequireSysfs(t, "/usr/include/bpf/bpf_helpers.h")
	bpfgen.CheckFresh(t, "hostrouting", "gen.go")
}
