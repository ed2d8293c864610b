package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// A cache holds every built artifact outside the repository, one directory
// per artifact named <name>-<key>, where the key hashes everything the
// artifact was built from (versions, the Go toolchain, the recipe's files).
// Changing any input gives a new key, so a stale artifact is never reused
// and a warm run finds every directory complete.
type cache struct {
	root string // ~/.cache/nodenet/kind
}

func defaultCacheRoot() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache directory: %w", err)
	}
	return filepath.Join(base, "nodenet", "kind"), nil
}

// key hashes the inputs of one artifact. Order matters only within a
// value; the inputs are named so two different splits never collide.
func key(inputs map[string]string) string {
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%d:%s=%d:%s\n", len(n), n, len(inputs[n]), inputs[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// goInputs are the inputs every Go build shares.
func goInputs(extra map[string]string) map[string]string {
	in := map[string]string{"go": runtime.Version(), "goos": runtime.GOOS, "goarch": runtime.GOARCH}
	for k, v := range extra {
		in[k] = v
	}
	return in
}

// dir is the artifact's directory; complete reports whether a build
// finished there (the stamp is written last).
func (c cache) dir(name, key string) string { return filepath.Join(c.root, name+"-"+key) }

const stampFile = ".complete"

func (c cache) complete(name, key string) bool {
	_, err := os.Stat(filepath.Join(c.dir(name, key), stampFile))
	return err == nil
}

func (c cache) markComplete(name, key string) error {
	return os.WriteFile(filepath.Join(c.dir(name, key), stampFile), []byte(name+"-"+key+"\n"), 0o644)
}

// stale lists the directories of name whose key is not key: what an input
// change left behind, for `prune`.
func (c cache) stale(name, key string) ([]string, error) {
	ents, err := os.ReadDir(c.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cache: %w", err)
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || !strings.HasPrefix(n, name+"-") {
			continue
		}
		rest := strings.TrimPrefix(n, name+"-")
		if rest != key && len(rest) == 12 && !strings.Contains(rest, "-") {
			out = append(out, filepath.Join(c.root, n))
		}
	}
	return out, nil
}
