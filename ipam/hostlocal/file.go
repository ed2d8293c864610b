package hostlocal

import (
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The store's files are opened with open(2) and wrapped by os.NewFile
// rather than with os.OpenFile: os.OpenFile tries to register every file
// with the runtime's poller (four more system calls for a regular file,
// which the poller refuses anyway, and on the first file the poller's own
// setup and thread wake-ups). A CNI command opens a handful of files in a
// process that lives a few milliseconds, so that was a measurable part.

// openFile is os.OpenFile without the poller.
func openFile(path string, flag int, perm uint32) (*os.File, error) {
	fd, err := unix.Open(path, flag|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readFile is os.ReadFile without the poller.
func readFile(path string) ([]byte, error) {
	f, err := openFile(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeFile is os.WriteFile without the poller.
func writeFile(path string, data []byte, perm uint32) error {
	f, err := openFile(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readDir is os.ReadDir without the poller: the entries sorted by name.
func readDir(dir string) ([]os.DirEntry, error) {
	f, err := openFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}
