package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
)

// readArchive returns the archive's files by name, failing on anything but
// directories and regular files.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		default:
			t.Fatalf("%s: unexpected type %q", h.Name, h.Typeflag)
		}
	}
}

type layerEntry struct {
	typ  byte
	mode int64
	link string
	data string
}

// readLayer gunzips and untars a layer blob.
func readLayer(t *testing.T, gz []byte) (map[string]layerEntry, []string, []byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]layerEntry{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, order, raw
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: mtime %v uid %d gid %d uname %q; want epoch, root", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = layerEntry{typ: h.Typeflag, mode: h.Mode, link: h.Linkname, data: string(data)}
		order = append(order, h.Name)
	}
}

func testImage(t *testing.T) Image {
	t.Helper()
	l1, l2 := NewLayer(), NewLayer()
	for _, e := range []Entry{
		{Path: "/usr/sbin/tool", Mode: 0o755, Data: []byte("#tool")},
		{Path: "usr/sbin/tool-alias", Link: "tool"},
		{Path: "./usr/sbin/tool-hard", Mode: 0o755, HardLink: "usr/sbin/tool"},
		{Path: "tmp", Mode: 0o777 | fs.ModeSticky, Dir: true},
		{Path: "etc/protocols", Mode: 0o644, Data: []byte("ip 0 IP\n")},
	} {
		if err := l1.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l2.Add(Entry{Path: "usr/local/bin/app", Mode: 0o755, Data: []byte("app")}); err != nil {
		t.Fatal(err)
	}
	return Image{Ref: "nodenet/test:v1", Architecture: "amd64", Layers: []*Layer{l1, l2}, LayerComments: []string{"base", "app"},
		Config: Config{Entrypoint: []string{"/usr/local/bin/app"}, Env: []string{"PATH=/usr/bin"}}}
}

// TestWriteLayout checks the archive against the OCI image layout and the
// Docker archive format: every descriptor's digest and size match its
// blob, the config's diff_ids are the uncompressed layers' digests, and
// manifest.json names the same config and layers.
func TestWriteLayout(t *testing.T) {
	var buf bytes.Buffer
	w, err := Write(&buf, testImage(t))
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, buf.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout: %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files[blobPath(d.Digest)]
		if !ok {
			t.Fatalf("no blob for %s", d.Digest)
		}
		if sha256Digest(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: digest %s size %d, descriptor size %d", d.Digest, sha256Digest(b), len(b), d.Size)
		}
		return b
	}
	var idx ociIndex
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != mediaIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index: %+v", idx)
	}
	md := idx.Manifests[0]
	if md.Digest != w.Digest || md.Annotations["io.containerd.image.name"] != "docker.io/nodenet/test:v1" ||
		md.Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Fatalf("index manifest descriptor: %+v (written %+v)", md, w)
	}
	var man ociManifest
	if err := json.Unmarshal(blob(md), &man); err != nil {
		t.Fatal(err)
	}
	if man.Config.Digest != w.ConfigDigest || len(man.Layers) != 2 {
		t.Fatalf("manifest: %+v", man)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || cfg.Config.Entrypoint[0] != "/usr/local/bin/app" ||
		len(cfg.RootFS.DiffIDs) != 2 || len(cfg.History) != 2 || cfg.History[1].Comment != "app" {
		t.Fatalf("config: %+v", cfg)
	}
	var size int64
	for i, ld := range man.Layers {
		entries, order, raw := readLayer(t, blob(ld))
		size += ld.Size
		if sha256Digest(raw) != cfg.RootFS.DiffIDs[i] {
			t.Fatalf("layer %d: diff_id %s, config says %s", i, sha256Digest(raw), cfg.RootFS.DiffIDs[i])
		}
		if i == 0 {
			want := []string{"etc/", "etc/protocols", "tmp/", "usr/", "usr/sbin/", "usr/sbin/tool", "usr/sbin/tool-alias", "usr/sbin/tool-hard"}
			if strings.Join(order, " ") != strings.Join(want, " ") {
				t.Fatalf("layer 0 order %q, want %q (parents first, sorted)", order, want)
			}
			if e := entries["tmp/"]; e.typ != tar.TypeDir || e.mode != 0o1777 {
				t.Errorf("tmp: %+v", e)
			}
			if e := entries["usr/sbin/tool-alias"]; e.typ != tar.TypeSymlink || e.link != "tool" {
				t.Errorf("symlink: %+v", e)
			}
			if e := entries["usr/sbin/tool-hard"]; e.typ != tar.TypeLink || e.link != "usr/sbin/tool" {
				t.Errorf("hard link: %+v", e)
			}
			if e := entries["usr/sbin/tool"]; e.data != "#tool" || e.mode != 0o755 {
				t.Errorf("file: %+v", e)
			}
		}
	}
	if size != w.Size {
		t.Errorf("Written.Size %d, layers add up to %d", w.Size, size)
	}
	var dm []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &dm); err != nil {
		t.Fatal(err)
	}
	if len(dm) != 1 || dm[0].Config != blobPath(w.ConfigDigest) || dm[0].RepoTags[0] != "nodenet/test:v1" ||
		dm[0].Layers[0] != blobPath(man.Layers[0].Digest) || dm[0].Layers[1] != blobPath(man.Layers[1].Digest) {
		t.Fatalf("manifest.json: %+v", dm)
	}
}

// TestWriteDeterministic: the same image twice is the same bytes, and a
// change of one file's mode changes the digest.
func TestWriteDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	wa, err := Write(&a, testImage(t))
	if err != nil {
		t.Fatal(err)
	}
	wb, err := Write(&b, testImage(t))
	if err != nil {
		t.Fatal(err)
	}
	if wa != wb || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two writes differ: %+v %+v", wa, wb)
	}
	img := testImage(t)
	l := NewLayer()
	if err := l.Add(Entry{Path: "usr/local/bin/app", Mode: 0o700, Data: []byte("app")}); err != nil {
		t.Fatal(err)
	}
	img.Layers[1] = l
	wc, err := Write(io.Discard, img)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Digest == wa.Digest {
		t.Fatal("a mode change did not change the digest")
	}
}

func TestLayerRejects(t *testing.T) {
	l := NewLayer()
	if err := l.Add(Entry{Path: "a/b", Mode: 0o644, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		e    Entry
		want string
	}{
		{Entry{Path: "a/b", Mode: 0o644, Data: []byte("y")}, "added twice with different contents"},
		{Entry{Path: "../etc/passwd", Data: []byte("x")}, "leaves the root"},
		{Entry{Path: "/", Dir: true}, "root itself"},
		{Entry{Path: "c", Data: []byte("x"), Link: "b"}, "more than one"},
	} {
		if err := l.Add(tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%+v) = %v, want %q", tc.e, err, tc.want)
		}
	}
	// The same file twice (two packages shipping one file) is fine.
	if err := l.Add(Entry{Path: "/a/b", Mode: 0o644, Data: []byte("x")}); err != nil {
		t.Errorf("identical entry refused: %v", err)
	}
	dangling := NewLayer()
	if err := dangling.Add(Entry{Path: "x", HardLink: "missing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dangling.pack(); err == nil || !strings.Contains(err.Error(), "not a regular file of the layer") {
		t.Errorf("dangling hard link packed: %v", err)
	}
}

func TestValidRef(t *testing.T) {
	for _, ok := range []string{"nodenet/nodenet:v1.37.2-nodenet", "nodenet", "localhost:5000/a/b:t", "a.b/c_d-e:latest"} {
		if err := validRef(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Nodenet/x:1", "a//b:1", "a:-x", "a:", "a:b c", "a:" + strings.Repeat("x", 129)} {
		if err := validRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for ref, want := range map[string]string{"nodenet": "docker.io/library/nodenet", "nodenet/x": "docker.io/nodenet/x", "reg.io/x": "reg.io/x", "localhost/x": "localhost/x"} {
		if n, _ := splitRef(ref); fullName(n) != want {
			t.Errorf("fullName(%q) = %q, want %q", ref, fullName(n), want)
		}
	}
}
