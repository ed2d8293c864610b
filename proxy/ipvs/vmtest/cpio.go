package vmtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks into its
// initial root file system. Entries must come parents first.
type cpioWriter struct {
	w   *bufio.Writer
	n   int64 // bytes written, for the 4-byte padding
	ino uint32
	err error
}

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: bufio.NewWriter(w)} }

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
)

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) { c.entry(name, modeDir|0o755, nil) }

// Symlink adds name pointing at target.
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, modeSymlink|0o777, []byte(target))
}

// Bytes adds a regular file holding data.
func (c *cpioWriter) Bytes(name string, perm uint32, data []byte) {
	c.entry(name, modeFile|perm, data)
}

// File adds the host file src (followed through symlinks) as name.
func (c *cpioWriter) File(name, src string) {
	if c.err != nil {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		c.err = fmt.Errorf("initramfs: %w", err)
		return
	}
	st, err := os.Stat(src)
	if err != nil {
		c.err = fmt.Errorf("initramfs: %w", err)
		return
	}
	c.Bytes(name, uint32(st.Mode().Perm()), data)
}

// Close writes the trailer and flushes.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
