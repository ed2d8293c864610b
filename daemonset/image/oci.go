package image

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Media types of the OCI image spec (v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Config is what a container started from the image runs.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// User is who the container runs as; "" is root.
	User   string
	Labels map[string]string
}

// Image is layers (lowest first), the run config and the name it loads as.
type Image struct {
	// Ref is the name `docker load` and `ctr images import` give the
	// image, e.g. "nodenet/nodenet:v0.4.0" (docker.io is implied).
	Ref          string
	Architecture string // GOARCH spelling: amd64, arm64
	Layers       []*Layer
	// LayerComments say what each layer holds (image history).
	LayerComments []string
	Config        Config
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociManifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type ociIndex struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type runConfig struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by,omitempty"`
	Comment   string `json:"comment,omitempty"`
}

type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

// dockerManifest is one entry of the Docker archive's manifest.json, which
// `docker load` reads (Docker before 25 knows nothing else).
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Written says what Write produced.
type Written struct {
	// Digest is the manifest's digest: the image ID registries and
	// containerd show (`ctr images ls`, RepoDigests).
	Digest string
	// ConfigDigest is the ID `docker images` shows.
	ConfigDigest string
	// Size is the sum of the compressed layers.
	Size int64
}

// Write packs img into w as an OCI image layout tar that also carries a
// Docker-archive manifest.json.
func Write(w io.Writer, img Image) (Written, error) {
	if err := validRef(img.Ref); err != nil {
		return Written{}, err
	}
	if len(img.Layers) == 0 {
		return Written{}, fmt.Errorf("image %s: no layers", img.Ref)
	}
	arch := img.Architecture
	if arch == "" {
		return Written{}, fmt.Errorf("image %s: no architecture", img.Ref)
	}
	blobs := map[string][]byte{}
	cfg := imageConfig{Created: epoch.Format("2006-01-02T15:04:05Z"), Architecture: arch, OS: "linux",
		Config: runConfig{User: img.Config.User, Env: img.Config.Env, Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd,
			WorkingDir: img.Config.WorkingDir, Labels: img.Config.Labels}}
	cfg.RootFS.Type = "layers"
	man := ociManifest{SchemaVersion: 2, MediaType: mediaManifest}
	var written Written
	var layerPaths []string
	for i, l := range img.Layers {
		p, err := l.pack()
		if err != nil {
			return Written{}, fmt.Errorf("layer %d: %w", i, err)
		}
		blobs[p.digest] = p.gz
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, p.diffID)
		h := history{Created: cfg.Created, CreatedBy: "nodenet daemonset/image"}
		if i < len(img.LayerComments) {
			h.Comment = img.LayerComments[i]
		}
		cfg.History = append(cfg.History, h)
		man.Layers = append(man.Layers, descriptor{MediaType: mediaLayer, Digest: p.digest, Size: int64(len(p.gz))})
		layerPaths = append(layerPaths, blobPath(p.digest))
		written.Size += int64(len(p.gz))
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return Written{}, fmt.Errorf("image config: %w", err)
	}
	cfgDigest := sha256Digest(cfgJSON)
	blobs[cfgDigest] = cfgJSON
	man.Config = descriptor{MediaType: mediaConfig, Digest: cfgDigest, Size: int64(len(cfgJSON))}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return Written{}, fmt.Errorf("image manifest: %w", err)
	}
	manDigest := sha256Digest(manJSON)
	blobs[manDigest] = manJSON
	name, tag := splitRef(img.Ref)
	idx := ociIndex{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{{
		MediaType: mediaManifest, Digest: manDigest, Size: int64(len(manJSON)),
		Annotations: map[string]string{
			// containerd (ctr import, kind load) names the image by this;
			// the OCI ref name is the tag alone.
			"io.containerd.image.name":          fullName(name) + ":" + tag,
			"org.opencontainers.image.ref.name": tag,
		},
	}}}
	idxJSON, err := json.Marshal(idx)
	if err != nil {
		return Written{}, fmt.Errorf("image index: %w", err)
	}
	dockerJSON, err := json.Marshal([]dockerManifest{{Config: blobPath(cfgDigest), RepoTags: []string{img.Ref}, Layers: layerPaths}})
	if err != nil {
		return Written{}, fmt.Errorf("docker manifest: %w", err)
	}

	tw := tar.NewWriter(w)
	files := map[string][]byte{
		"oci-layout":    []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":    idxJSON,
		"manifest.json": dockerJSON,
	}
	for d, b := range blobs {
		files[blobPath(d)] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return Written{}, fmt.Errorf("write image: %w", err)
		}
	}
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return Written{}, fmt.Errorf("write image %s: %w", n, err)
		}
		if _, err := tw.Write(b); err != nil {
			return Written{}, fmt.Errorf("write image %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Written{}, fmt.Errorf("write image: %w", err)
	}
	written.Digest, written.ConfigDigest = manDigest, cfgDigest
	return written, nil
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// splitRef splits "name:tag" ("name" alone means tag latest).
func splitRef(ref string) (name, tag string) {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// fullName is the fully qualified name containerd uses: docker.io/library/x
// for a bare name, docker.io/ prefixed unless the first part is a host.
func fullName(name string) string {
	first, _, found := strings.Cut(name, "/")
	switch {
	case !found:
		return "docker.io/library/" + name
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return name
	}
	return "docker.io/" + name
}

// validRef accepts what Docker accepts as a repository[:tag]: lower-case
// name components of [a-z0-9._-] separated by "/", a tag of [A-Za-z0-9_.-]
// up to 128 characters not starting with "." or "-".
func validRef(ref string) error {
	name, tag := splitRef(ref)
	bad := func(why string) error { return fmt.Errorf("image reference %q: %s", ref, why) }
	if name == "" {
		return bad("empty name")
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" {
			return bad("empty path component")
		}
		for _, r := range part {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == ':') {
				return bad(fmt.Sprintf("name component %q: only a-z, 0-9, '.', '_' and '-'", part))
			}
		}
	}
	if tag == "" || len(tag) > 128 || tag[0] == '.' || tag[0] == '-' {
		return bad("tag must be 1–128 characters, not starting with '.' or '-'")
	}
	for _, r := range tag {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return bad(fmt.Sprintf("tag %q: only A-Z, a-z, 0-9, '.', '_' and '-'", tag))
		}
	}
	return nil
}
