package hostlocal

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultDataDir is where host-local keeps its networks.
const DefaultDataDir = "/var/lib/cni/networks"

// File names inside a network's directory, shared with host-local.
const (
	lockName           = "lock"
	lastReservedPrefix = "last_reserved_ip."
	lineBreak          = "\r\n"
	// sparePrefix names released reservation files kept for reuse (see
	// reserve). Not being addresses, host-local ignores them (its GC
	// deletes them, which is fine).
	sparePrefix = ".free-"
	maxSpares   = 64
)

// Store is one network's allocation directory: one file per reserved
// address, named by the address and holding "<containerID>\r\n<ifname>".
// Every change happens under an exclusive flock on the directory's "lock"
// file, the lock host-local takes, so nodenet and host-local processes can
// share a directory. A Store is not safe for concurrent use by goroutines;
// open one per goroutine (flock is per open file, so they still exclude
// each other).
type Store struct {
	dir  string
	lock *os.File
	// spares are the free files found by the last scan, under the lock.
	spares []string
}

// Open creates (if needed) and opens the directory of network under
// dataDir; an empty dataDir means DefaultDataDir.
func Open(dataDir, network string) (*Store, error) {
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	if network == "" || network == "." || network == ".." || strings.ContainsRune(network, '/') {
		return nil, fmt.Errorf("open store: invalid network name %q", network)
	}
	dir := filepath.Join(dataDir, network)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create store %s: %w", dir, err)
	}
	lock, err := openFile(filepath.Join(dir, lockName), unix.O_RDONLY|unix.O_CREAT, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open store lock: %w", err)
	}
	return &Store{dir: dir, lock: lock}, nil
}

// Dir is the network's directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the lock file.
func (s *Store) Close() error { return s.lock.Close() }

// locked runs fn holding the directory lock. flock blocks without a
// deadline, as host-local's does; holders only do a few file operations.
func (s *Store) locked(fn func() error) error {
	for {
		err := unix.Flock(int(s.lock.Fd()), unix.LOCK_EX)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("lock %s: %w", s.lock.Name(), err)
		}
	}
	defer unix.Flock(int(s.lock.Fd()), unix.LOCK_UN)
	return fn()
}

// Reservation is one reserved address and its owner. IfName is empty for
// files written by host-local releases that recorded only the container ID;
// such a reservation belongs to every interface of that container.
type Reservation struct {
	IP          netip.Addr
	ContainerID string
	IfName      string
}

// Owns reports whether the reservation belongs to the attachment.
func (r Reservation) Owns(containerID, ifName string) bool {
	return r.ContainerID == strings.TrimSpace(containerID) && (r.IfName == ifName || r.IfName == "")
}

func parseOwner(data []byte) (id, ifName string) {
	key := strings.TrimSpace(string(data))
	id, ifName, _ = strings.Cut(key, lineBreak)
	return id, ifName
}

func ownerKey(containerID, ifName string) string {
	return strings.TrimSpace(containerID) + lineBreak + ifName
}

// scan reads every reservation. Files whose name is not an address (the
// lock, last_reserved_ip.N, anything foreign) are not reservations.
func (s *Store) scan() ([]Reservation, error) {
	entries, err := readDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read store %s: %w", s.dir, err)
	}
	out := make([]Reservation, 0, len(entries))
	s.spares = s.spares[:0]
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), sparePrefix) && e.Type().IsRegular() {
			s.spares = append(s.spares, e.Name())
			continue
		}
		ip, ok := reservationName(e)
		if !ok {
			continue
		}
		data, err := readFile(filepath.Join(s.dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read reservation: %w", err)
		}
		id, ifName := parseOwner(data)
		out = append(out, Reservation{IP: ip, ContainerID: id, IfName: ifName})
	}
	return out, nil
}

func reservationName(e fs.DirEntry) (netip.Addr, bool) {
	if !e.Type().IsRegular() {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(e.Name())
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// Reservations lists every reservation in the store.
func (s *Store) Reservations() ([]Reservation, error) {
	var out []Reservation
	err := s.locked(func() (err error) {
		out, err = s.scan()
		return err
	})
	return out, err
}

// Lookup returns the addresses reserved for an attachment.
func (s *Store) Lookup(containerID, ifName string) ([]netip.Addr, error) {
	all, err := s.Reservations()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, r := range all {
		if r.Owns(containerID, ifName) {
			out = append(out, r.IP)
		}
	}
	return out, nil
}

// reserve claims ip for the attachment; it returns false when the
// address is already taken. The claim is atomic among processes: the file
// appears with its content by rename without replacing (or by O_EXCL).
// Released files are recycled rather than deleted and created anew,
// because allocating an inode is the one expensive step (about 0.4 ms on
// some ext4 setups, most of an allocation); see the package documentation
// for why nothing is fsynced.
func (s *Store) reserve(ip netip.Addr, containerID, ifName string) (bool, error) {
	path := filepath.Join(s.dir, ip.String())
	content := []byte(ownerKey(containerID, ifName))
	for len(s.spares) > 0 {
		spare := filepath.Join(s.dir, s.spares[len(s.spares)-1])
		s.spares = s.spares[:len(s.spares)-1]
		if err := overwrite(spare, content); err != nil {
			continue // gone (host-local's GC) or unusable: try the next
		}
		err := unix.Renameat2(unix.AT_FDCWD, spare, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EEXIST):
			s.spares = append(s.spares, filepath.Base(spare))
			return false, nil
		}
		// No RENAME_NOREPLACE on this file system: create instead.
		break
	}
	f, err := openFile(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reserve %s: %w", ip, err)
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("reserve %s: %w", ip, err)
	}
	return true, nil
}

// overwrite replaces the content of an existing file in place. Unlike
// O_TRUNC (or rename over the file) it does not make ext4 flush the file
// on close (auto_da_alloc), which would cost as much as a new inode.
func overwrite(path string, content []byte) error {
	f, err := openFile(path, unix.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(content, 0)
	if err == nil {
		err = f.Truncate(int64(len(content)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// release removes a reservation file, keeping it as a spare while there
// are few.
func (s *Store) release(ip netip.Addr) error {
	path := filepath.Join(s.dir, ip.String())
	if len(s.spares) < maxSpares {
		spare := fmt.Sprintf("%s%016x", sparePrefix, rand.Uint64())
		if err := os.Rename(path, filepath.Join(s.dir, spare)); err == nil {
			s.spares = append(s.spares, spare)
			return nil
		}
	}
	return os.Remove(path)
}

func (s *Store) lastReserved(set int) netip.Addr {
	data, err := readFile(filepath.Join(s.dir, fmt.Sprintf("%s%d", lastReservedPrefix, set)))
	if err != nil {
		return netip.Addr{}
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(string(data)))
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// setLastReserved records the round-robin cursor, in place (see
// overwrite). It is a hint: a lost or torn write only makes the next
// allocation start from the range start.
func (s *Store) setLastReserved(set int, ip netip.Addr) error {
	path := filepath.Join(s.dir, fmt.Sprintf("%s%d", lastReservedPrefix, set))
	err := overwrite(path, []byte(ip.String()))
	if errors.Is(err, fs.ErrNotExist) {
		err = writeFile(path, []byte(ip.String()), 0o600)
	}
	if err != nil {
		return fmt.Errorf("record last reserved address: %w", err)
	}
	return nil
}

// removeWhere deletes the reservations that match and returns them.
func (s *Store) removeWhere(all []Reservation, match func(Reservation) bool) ([]Reservation, error) {
	var removed []Reservation
	var errs []error
	for _, r := range all {
		if !match(r) {
			continue
		}
		err := s.release(r.IP)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("release %s: %w", r.IP, err))
			continue
		}
		removed = append(removed, r)
	}
	return removed, errors.Join(errs...)
}

// Release frees every address of the attachment; releasing nothing is not
// an error. Like host-local, files that name only the container (older
// host-local releases) are released when no exact match exists.
func (s *Store) Release(containerID, ifName string) ([]netip.Addr, error) {
	var ips []netip.Addr
	err := s.locked(func() error {
		all, err := s.scan()
		if err != nil {
			return err
		}
		id := strings.TrimSpace(containerID)
		removed, err := s.removeWhere(all, func(r Reservation) bool { return r.ContainerID == id && r.IfName == ifName })
		if len(removed) == 0 && err == nil {
			removed, err = s.removeWhere(all, func(r Reservation) bool { return r.ContainerID == id && r.IfName == "" })
		}
		for _, r := range removed {
			ips = append(ips, r.IP)
		}
		return err
	})
	return ips, err
}

// Attachment names a container interface, the unit CNI GC reasons about.
type Attachment struct {
	ContainerID string
	IfName      string
}

// GC releases every reservation whose attachment is not in valid and
// returns what it released. Files without an interface name are kept when
// their container has any valid attachment. Unreadable or empty files (a
// writer that crashed between create and write) belong to nobody and go.
func (s *Store) GC(valid []Attachment) ([]Reservation, error) {
	keep := make(map[Attachment]bool, len(valid))
	keepID := make(map[string]bool, len(valid))
	for _, a := range valid {
		id := strings.TrimSpace(a.ContainerID)
		keep[Attachment{id, a.IfName}] = true
		keepID[id] = true
	}
	var removed []Reservation
	err := s.locked(func() error {
		all, err := s.scan()
		if err != nil {
			return err
		}
		removed, err = s.removeWhere(all, func(r Reservation) bool {
			if r.IfName == "" {
				return !keepID[r.ContainerID] || r.ContainerID == ""
			}
			return !keep[Attachment{r.ContainerID, r.IfName}]
		})
		return err
	})
	return removed, err
}
