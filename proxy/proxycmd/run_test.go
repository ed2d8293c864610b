package proxycmd

import (
	"strings"
	"testing"
)

// TestProxyDumpNeedsPins: --dump reads pins only, and says so when there
// are none; other modes have no tables to dump.
func TestProxyDumpNeedsPins(t *testing.T) {
	err := Run(t.Context(), []string{"--proxy-mode", "ebpf", "--dump", "--bpf-pin-dir", t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "nothing pinned") {
		t.Errorf("--dump without pins: %v", err)
	}
	if err := Run(t.Context(), []string{"--proxy-mode", "nftables", "--dump"}); err == nil || !strings.Contains(err.Error(), "only --proxy-mode=ebpf") {
		t.Errorf("--dump in nftables mode: %v", err)
	}
}
