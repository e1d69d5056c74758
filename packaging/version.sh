#!/bin/sh
# version.sh: the package version of this checkout: 0.1.0~git<commit time>.<commit>, +dirty with local changes.
# "~" sorts before the release it leads to, in dpkg and in rpm.
set -eu
cd "$(dirname "$0")/.."
v="0.1.0~git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$(git rev-parse --short=7 HEAD)"
[ -z "$(git status --porcelain 2>/dev/null)" ] || v="$v+dirty"
echo "$v"
