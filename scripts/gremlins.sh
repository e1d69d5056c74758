#!/usr/bin/env bash
# Builds gremlins, with the patches scripts/gremlins-*.patch applied, into
# the user's cache (once per version and patch set), and prints its path.
#
# gremlins-switch-cases.patch: gremlins takes a mutant's coverage from Go's
# coverage profile, in which a switch's case expressions and package-level
# declarations belong to no block, so it reported every mutant there as
# not covered and never ran it (go-gremlins/gremlins#298). Patched, a case
# expression counts as covered when its clause's body ran, or a later
# clause's, or the default's (each proves it was evaluated), and a
# package-level declaration, which runs at init, always does.
#
# usage: scripts/gremlins.sh
set -euo pipefail
version=v0.6.0
here=$(cd "$(dirname "$0")" && pwd)
sum=$(cat "$here"/gremlins-*.patch | sha256sum | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/runmesh-tools/gremlins-$version-$sum
bin=$dir/gremlins
if [ ! -x "$bin" ]; then
	echo "gremlins.sh: building gremlins $version, patched, into $dir" >&2
	src=$(cd / && GOFLAGS= go mod download -json "github.com/go-gremlins/gremlins@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp -r "$src"/. "$tmp"
	chmod -R u+w "$tmp"
	for p in "$here"/gremlins-*.patch; do
		patch -s -d "$tmp" -p1 <"$p"
	done
	mkdir -p "$dir"
	(cd "$tmp" && GOFLAGS= CGO_ENABLED=0 go build -o "$bin.tmp" ./cmd/gremlins)
	mv "$bin.tmp" "$bin"
fi
echo "$bin"
