#!/usr/bin/env bash
# fuzz.sh [FUZZTIME] runs every Go fuzz target of the module for FUZZTIME
# each (default 5s). go test -fuzz takes one package and one target at a
# time, so the targets are found by name. The seed corpora (f.Add and
# testdata/fuzz) already run as ordinary tests in `make test`; this adds
# the fuzzing itself. A crash is written to the package's testdata/fuzz
# directory by go test: commit it as a regression case once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-5s}"
GO="${GO:-go}"
# FUZZ_EXCLUDE: an extended regexp of package directories not to fuzz (their
# seeds still run in make test). A fuzzing build instruments every package
# it links: for apiserver and flanneld that is all of client-go and etcd,
# an hour of compiling on a loaded 2-core machine, so CI leaves them out.
exclude="${FUZZ_EXCLUDE:-^$}"
failed=0
while IFS=: read -r file name; do
	pkg="./$(dirname "$file")"
	if [[ "$(dirname "$file")" =~ $exclude ]]; then
		echo "== skip $pkg $name (FUZZ_EXCLUDE)"
		continue
	fi
	echo "== fuzz $pkg $name ($fuzztime)"
	if ! "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"; then
		failed=1
	fi
done < <(grep -rEo --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)' . | sed -E 's#^\./##; s#:func #:#' | sort)
exit "$failed"
