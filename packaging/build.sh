#!/bin/sh
# build.sh OUT [VERSION]: the runmesh-agent and runmesh-server packages, .deb and .rpm, into OUT (make packages).
# VERSION defaults to the one git gives this checkout (packaging/version.sh).
set -eu
cd "$(dirname "$0")/.."
out=$1
version=${2:-$(packaging/version.sh)}
arch=$(go env GOARCH)
build=dist/build
rm -rf "$build" && mkdir -p "$build" "$out"

ldflags="-s -w -X github.com/runmesh/runmesh/controlplane.Version=$version -X main.version=$version"
# The agent links podman's bindings: the tags are the Makefile's PODMAN_TAGS.
CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"} \
  go build -trimpath -buildmode=pie -tags remote,containers_image_openpgp,exclude_graphdriver_btrfs -ldflags "$ldflags" \
  -o "$build/" ./cmd/runmesh-agent ./cmd/runmesh-server ./cmd/runmesh

# A Debian changelog (native package: changelog.gz), its one entry this build.
when=$(git log -1 --format=%cD 2>/dev/null || date -R)
cat >"$build/changelog" <<CHANGES
runmesh ($version) unstable; urgency=medium

  * Built from $(git rev-parse --short HEAD 2>/dev/null || echo "an unknown commit"); see the repository's history.

 -- runmesh maintainers <maintainers@runmesh.dev>  $when
CHANGES
gzip -9n "$build/changelog"

# nfpm, the tool packaging/go.mod pins, run from here: the configs' paths are the repository's.
go -C packaging build -o "$PWD/$build/nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm
for p in agent server; do
  for f in deb rpm; do
    VERSION=$version ARCH=$arch "$build/nfpm" package --config packaging/nfpm-$p.yaml --packager $f --target "$out/" >/dev/null
  done
done
ls "$out"
