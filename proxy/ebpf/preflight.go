package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/proxy"
)

// FamilyPinDir is family f's pin directory below a pin root (what
// --bpf-pin-dir names): root/ipv4 or root/ipv6.
func FamilyPinDir(root string, f proxy.Family) string { return filepath.Join(root, familyDir(f)) }

// Preflight checks, before anything is loaded, what the data plane needs
// from the machine, so a missing piece is one clear error at start instead
// of a failed sync: pinRoot is on a bpf filesystem (or can be created on
// one) and cgroup is a cgroup v2 directory (the root only with rootOK).
func Preflight(pinRoot, cgroup string, rootOK bool) error {
	var errs []error
	if err := checkBPFFS(pinRoot); err != nil {
		errs = append(errs, err)
	}
	if err := checkCgroup(cgroup, rootOK); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkBPFFS accepts a directory on a bpf filesystem, or a missing one
// whose nearest existing parent is on one (Sync creates it).
func checkBPFFS(dir string) error {
	p := dir
	for {
		var fs unix.Statfs_t
		err := unix.Statfs(p, &fs)
		if err == nil {
			if fs.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("pin directory %s is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)", dir)
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) || p == filepath.Dir(p) {
			return fmt.Errorf("statfs %s: %w", p, err)
		}
		p = filepath.Dir(p)
	}
}

// verifierLines is how much of a verifier log a load error carries: the
// end, where the verifier says what it rejected.
const verifierLines = 12

// loadError explains a failed collection load. cilium/ebpf's error names
// the program ("program connect4: load program: …"); a verifier rejection
// gets the log's last lines too, which say why.
func loadError(err error, pinDir string) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		log := ve.Log
		if len(log) > verifierLines {
			log = log[len(log)-verifierLines:]
		}
		return fmt.Errorf("load BPF programs: %w; the verifier's last lines:\n%s", err, strings.Join(log, "\n"))
	}
	return fmt.Errorf("load BPF programs and pinned maps from %s: %w", pinDir, err)
}
