package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// Entry is one file system object of a layer. Exactly one of Data (a
// regular file), Link (a symbolic link), HardLink (another regular file of
// the same layer) or Dir describes it.
type Entry struct {
	Path     string // absolute or relative to /; cleaned
	Mode     fs.FileMode
	Data     []byte
	Link     string
	HardLink string
	Dir      bool
}

// Layer is a set of entries keyed by cleaned path. Parent directories are
// added (0755) when the layer is packed.
type Layer struct {
	entries map[string]Entry
}

// NewLayer returns an empty layer.
func NewLayer() *Layer { return &Layer{entries: map[string]Entry{}} }

// cleanPath makes p relative to the root ("usr/sbin/nft"), rejecting paths
// that climb out of it.
func cleanPath(p string) (string, error) {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q leaves the root", p)
		}
	}
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if c == "" {
		return "", fmt.Errorf("path %q: the root itself is not an entry", p)
	}
	return c, nil
}

// Add puts e into the layer. The same path twice is allowed only for
// directories or for identical entries (two Debian packages may ship the
// same directory; never two different files).
func (l *Layer) Add(e Entry) error {
	p, err := cleanPath(e.Path)
	if err != nil {
		return err
	}
	e.Path = p
	kinds := 0
	for _, set := range []bool{e.Data != nil, e.Link != "", e.HardLink != "", e.Dir} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return fmt.Errorf("%s: more than one of data, link, hard link, directory", p)
	}
	if e.HardLink != "" {
		if e.HardLink, err = cleanPath(e.HardLink); err != nil {
			return fmt.Errorf("%s: hard link: %w", p, err)
		}
	}
	if old, ok := l.entries[p]; ok {
		if old.Dir && e.Dir {
			return nil
		}
		if !sameEntry(old, e) {
			return fmt.Errorf("%s: added twice with different contents", p)
		}
		return nil
	}
	l.entries[p] = e
	return nil
}

func sameEntry(a, b Entry) bool {
	return a.Mode == b.Mode && bytes.Equal(a.Data, b.Data) && a.Link == b.Link && a.HardLink == b.HardLink && a.Dir == b.Dir
}

// Paths lists the layer's entries in the order they are packed.
func (l *Layer) Paths() []string {
	seen := map[string]bool{}
	for p := range l.entries {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			seen[d] = true
		}
		seen[p] = true
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// epoch is every entry's modification time: the image's contents, not
// when they were built, decide its digest.
var epoch = time.Unix(0, 0).UTC()

// packed is a layer as a blob: the gzip stream and the digests both ways.
type packed struct {
	gz     []byte
	digest string // of gz: the blob
	diffID string // of the tar: the config's rootfs
}

// pack writes the layer as a tar stream (parents before children, sorted)
// and compresses it.
func (l *Layer) pack() (packed, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, p := range l.Paths() {
		e, ok := l.entries[p]
		if !ok { // a parent directory nobody added: implied
			e = Entry{Path: p, Mode: 0o755, Dir: true}
		}
		h := &tar.Header{Name: p, Mode: tarMode(e.Mode), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.Dir:
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case e.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		case e.HardLink != "":
			if t, ok := l.entries[e.HardLink]; !ok || t.Data == nil {
				return packed{}, fmt.Errorf("%s: hard link to %s, which is not a regular file of the layer", p, e.HardLink)
			}
			h.Typeflag, h.Linkname = tar.TypeLink, e.HardLink
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return packed{}, fmt.Errorf("tar header %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return packed{}, fmt.Errorf("tar %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return packed{}, fmt.Errorf("close tar: %w", err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return packed{}, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return packed{}, fmt.Errorf("gzip layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return packed{}, fmt.Errorf("gzip layer: %w", err)
	}
	return packed{gz: gz.Bytes(), digest: sha256Digest(gz.Bytes()), diffID: sha256Digest(raw.Bytes())}, nil
}

// tarMode keeps permission and setuid/setgid/sticky bits in tar's octal form.
func tarMode(m fs.FileMode) int64 {
	v := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

func sha256Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
