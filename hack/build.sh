#!/usr/bin/env bash
# build.sh OUT PKG [go build flags...] — `go build -o OUT PKG` that says what
# a long first build is doing (module downloads, then a line every 50
# packages compiled) and stays quiet when the build cache is warm.
set -euo pipefail
out=$1 pkg=$2
shift 2
go=${GO:-go}

# Missing modules: say so before `go build` would fetch them silently.
if ! GOFLAGS=-mod=mod GOPROXY=off "$go" list -deps "$pkg" >/dev/null 2>&1; then
	echo "build $out: downloading Go modules from the module proxy (once; about 260 MB unpacked)…"
	t=$SECONDS
	"$go" mod download
	echo "build $out: modules downloaded in $((SECONDS - t)) s"
fi

# Packages the build cache does not hold yet (the main package itself is
# always "not installed", which costs only a link).
stale=$("$go" list -deps -f '{{if .Stale}}{{.StaleReason}}{{end}}' "$pkg" | grep -vc '^not installed but available in build cache' || true)
if [ "$stale" -gt 500 ]; then
	echo "build $out: compiling $stale packages; a first build takes about 8–20 minutes on 2 cores (client-go and etcd are most of it), later builds seconds"
elif [ "$stale" -gt 50 ]; then
	echo "build $out: compiling $stale packages"
fi

t=$SECONDS
# `go build -v` names each package as it compiles it; anything else it prints
# (compiler errors) is passed through as it is.
"$go" build -v -o "$out" "$@" "$pkg" 2>&1 | awk -v n="$stale" -v out="$out" '
	/^[A-Za-z0-9._~\/-]+$/ { k++; if (n > 50 && k % 50 == 0) { printf "build %s: %d/%d packages compiled\n", out, k, n; fflush() }; next }
	{ print; fflush() }'
if [ "$stale" -gt 50 ]; then
	echo "build $out: done in $((SECONDS - t)) s"
fi
