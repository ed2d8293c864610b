package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/nodenet/nodenet/daemonset/image"
)

func main() {
	home, _ := os.UserCacheDir()
	out := flag.String("out", "bin/nodenet-image.tar", "image archive to write (loads with docker load, ctr images import, kind load image-archive)")
	ref := flag.String("tag", image.DefaultRef, "name:tag the image loads as")
	cache := flag.String("deb-cache", filepath.Join(home, "nodenet", "debs"), "where downloaded Debian packages are kept")
	repo := flag.String("repo", ".", "the nodenet source tree")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := image.Build(ctx, image.BuildOptions{RepoDir: *repo, Out: *out, Ref: *ref, CacheDir: *cache, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodenet-image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s\n  digest %s\n  id     %s\n  layers %.1f MB compressed, %d Debian packages\n",
		*out, *ref, b.Digest, b.ConfigDigest, float64(b.Size)/1e6, len(b.Packages))
}
