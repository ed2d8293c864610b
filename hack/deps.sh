#!/usr/bin/env bash
# deps.sh PKG... — make sure the Debian packages the tests use are present.
# As root with apt-get it installs the missing ones; otherwise it names them
# and exits non-zero, so `make test` never fails later for an obscure reason.
set -euo pipefail
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
		apt-get update -qq && apt-get install -y --no-install-recommends "${missing[@]}"
	}
	exit 0
fi
echo "missing Debian packages: ${missing[*]}" >&2
echo "install them with: apt-get install ${missing[*]}" >&2
exit 1
