package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debianSuite is the release of the node image and of every package the
// tool downloads: the host's own (Debian 12).
const debianSuite = "bookworm"

// aptConfig is an apt state of the tool's own under the cache, with
// non-free enabled (netperf lives there), so the bench image can be built
// without editing the host's apt sources.
type aptConfig struct {
	dir    string // config, lists and package cache
	debs   string // downloaded .debs
	mirror string // the host's Debian archive
	// security is the host's security archive, "" if it has none: the
	// host's packages come from it, and a package installed from it is
	// one apt-cache knows no .deb for unless it is a source here too.
	security string
}

func newAptConfig(c cache) (aptConfig, error) {
	m, err := hostMirror(debianSuite)
	if err != nil {
		return aptConfig{}, err
	}
	sec, _ := hostMirror(debianSuite + "-security")
	return aptConfig{dir: filepath.Join(c.root, "apt"), debs: filepath.Join(c.root, "debs"), mirror: m, security: sec}, nil
}

func (a aptConfig) env() map[string]string {
	return map[string]string{"APT_CONFIG": filepath.Join(a.dir, "apt.conf")}
}

// sources is the sources.list: the host's archives with non-free added.
func (a aptConfig) sources() string {
	keyring := "/usr/share/keyrings/debian-archive-keyring.gpg"
	s := fmt.Sprintf("deb [signed-by=%s] %s %s main non-free\ndeb [signed-by=%s] %s %s-updates main non-free\n",
		keyring, a.mirror, debianSuite, keyring, a.mirror, debianSuite)
	if a.security != "" {
		s += fmt.Sprintf("deb [signed-by=%s] %s %s-security main non-free\n", keyring, a.security, debianSuite)
	}
	return s
}

// update writes the configuration and runs apt-get update against it.
func (a aptConfig) update(ctx context.Context) error {
	for _, d := range []string{"sources.list.d", "state/lists/partial", "cache/archives/partial", "preferences.d"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf(`Dir::Etc::SourceList "%[1]s/sources.list";
Dir::Etc::SourceParts "%[1]s/sources.list.d";
Dir::Etc::Preferences "%[1]s/preferences";
Dir::Etc::PreferencesParts "%[1]s/preferences.d";
Dir::State::Lists "%[1]s/state/lists";
Dir::Cache "%[1]s/cache";
`, a.dir)
	if err := os.WriteFile(filepath.Join(a.dir, "apt.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a.dir, "sources.list"), []byte(a.sources()), 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "apt-get", "update", "-q")
	cmd.Env = append(os.Environ(), "APT_CONFIG="+filepath.Join(a.dir, "apt.conf"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update (the tool's own sources): %w: %s", err, out)
	}
	return nil
}

// hostMirror is the archive of suite the host's apt uses (deb822 .sources
// or a one-line sources.list): the only package sources reachable here.
func hostMirror(suite string) (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		if m := mirrorIn(f, true, suite); m != "" {
			return m, nil
		}
	}
	files, _ = filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{"/etc/apt/sources.list"}, files...) {
		if m := mirrorIn(f, false, suite); m != "" {
			return m, nil
		}
	}
	return "", fmt.Errorf("no Debian %s archive in the host's apt sources", suite)
}

// mirrorIn finds the URI of a stanza or line whose suite is suite itself
// (bookworm matches neither bookworm-security nor bookworm-updates).
func mirrorIn(path string, deb822 bool, suite string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return parseMirror(bufio.NewScanner(f), deb822, suite)
}

func parseMirror(sc *bufio.Scanner, deb822 bool, want string) string {
	var uri string
	var suite bool
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if !deb822 {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "deb" {
				i := 1
				for i < len(f) && strings.HasPrefix(f[i], "[") {
					for i < len(f) && !strings.HasSuffix(f[i], "]") {
						i++
					}
					i++
				}
				if i+1 < len(f) && f[i+1] == want {
					return f[i]
				}
			}
			continue
		}
		if line == "" {
			if uri != "" && suite {
				return uri
			}
			uri, suite = "", false
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "URIs":
			uri = strings.Fields(v)[0]
		case "Suites":
			for _, s := range strings.Fields(v) {
				suite = suite || s == want
			}
		}
	}
	if uri != "" && suite {
		return uri
	}
	return ""
}
