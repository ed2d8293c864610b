package ebpf

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/nodenet/nodenet/internal/bpfgen"
	"github.com/nodenet/nodenet/internal/nettest"
)

// TestGeneratedObjectIsFresh regenerates the bpf2go output from
// bpf/socklb.c, bpf/sockdestroy.c and bpf/tcnat.c with gen.go's and
// tcgen.go's own commands
// into a temporary directory and requires the committed files to be
// identical: a C change without `go generate` (or a stale .o) fails here.
// Needs clang, llvm-strip and libbpf-dev (CI installs them; without
// NODENET_PRIVILEGED=1 it skips).
func TestGeneratedObjectIsFresh(t *testing.T) {
	nettest.RequireTool(t, "clang")
	nettest.RequireTool(t, "llvm-strip")
	nettest.RequireSysfs(t, "/usr/include/bpf/bpf_helpers.h")
	for _, gen := range []string{"gen.go", "tcgen.go"} {
		t.Run(gen, func(t *testing.T) { bpfgen.CheckFresh(t, "ebpf", gen) })
	}
}

// TestMapLayoutsMatchGoTypes compares each map's key and value type in the
// object's BTF (what the C programs read) with the Go type the sync writes:
// same size, same fields at the same offsets.
// The socket destroy program shares the reverse map, so its declaration
// of it must match socklb's Go types too.
func TestMapLayoutsMatchGoTypes(t *testing.T) {
	spec, err := loadSocklb()
	if err != nil {
		t.Fatal(err)
	}
	checkMapLayouts(t, spec, map[string][2]any{
		socklbMapServices:   {svcKey{}, svcValue{}},
		socklbMapBackends:   {backendKey{}, addrPort{}},
		socklbMapReverse:    {socklbRevKey{}, addrPort{}},
		socklbMapAffinity:   {socklbAffKey{}, socklbAffValue{}},
		socklbMapLocalAddrs: {localAddr{}, uint8(0)},
	})
	dspec, err := loadSockdestroy()
	if err != nil {
		t.Fatal(err)
	}
	checkMapLayouts(t, dspec, map[string][2]any{
		sockdestroyMapReverse: {socklbRevKey{}, addrPort{}},
		sockdestroyMapDoomed:  {doomedKey{}, uint8(0)},
	})
}

func checkMapLayouts(t *testing.T, spec *ebpf.CollectionSpec, want map[string][2]any) {
	t.Helper()
	for name, kv := range want {
		m := spec.Maps[name]
		if m == nil {
			t.Fatalf("no map %s in the object", name)
		}
		for i, typ := range []btf.Type{m.Key, m.Value} {
			goType := reflect.TypeOf(kv[i])
			if err := sameLayout(typ, goType); err != nil {
				t.Errorf("map %s %s: %v", name, [2]string{"key", "value"}[i], err)
			}
		}
	}
}

// sameLayout checks a C struct against a Go struct, nested structs
// included, by size and by member name and offset.
func sameLayout(c btf.Type, g reflect.Type) error {
	size, err := btf.Sizeof(c)
	if err != nil {
		return err
	}
	if uintptr(size) != g.Size() {
		return fmt.Errorf("%s is %d bytes in C, %s is %d in Go", c.TypeName(), size, g, g.Size())
	}
	st, ok := btf.UnderlyingType(c).(*btf.Struct)
	if !ok {
		return nil
	}
	var fields []reflect.StructField
	for i := range g.NumField() {
		if f := g.Field(i); f.Name != "_" {
			fields = append(fields, f)
		}
	}
	if len(fields) != len(st.Members) {
		return fmt.Errorf("%s has %d members in C, %d in Go", c.TypeName(), len(st.Members), len(fields))
	}
	for i, m := range st.Members {
		f := fields[i]
		if !strings.EqualFold(strings.ReplaceAll(m.Name, "_", ""), f.Name) {
			return fmt.Errorf("%s member %d is %s in C, %s in Go", c.TypeName(), i, m.Name, f.Name)
		}
		if uintptr(m.Offset.Bytes()) != f.Offset {
			return fmt.Errorf("%s.%s at %d in C, %d in Go", c.TypeName(), m.Name, m.Offset.Bytes(), f.Offset)
		}
		if err := sameLayout(m.Type, f.Type); err != nil {
			return err
		}
	}
	return nil
}
