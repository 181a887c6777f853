#!/usr/bin/env bash
# The multi-platform image the release pushes: the single-platform image
# tarballs hack/build-image-tarball.sh writes (one a value of ARCH) as one OCI
# image index, in an OCI image layout in a tar (`skopeo copy --all
# oci-archive:...` pushes the index and every image). Each image goes in as
# it is (hack/ociimage/main.go, index mode): its manifest digest in the index
# is its digest in its own tarball, the one the tests read, and its platform
# is its config's. Two images of one platform, or an image whose config names
# none, are refused. The layout is tarred as hack/build-image-tarball.sh tars
# its own, so the same tarballs at the same commit give the same bytes.
# test/release/index.rs checks the platforms and that each image's binaries
# are built for its architecture.
#
#   OUT=target/image/hcp-ingress.oci.tar   the tarball to write
#   IMAGE=ghcr.io/hcp-ingress/hcp-ingress  repository, and TAG=dev: the name
#                                          the index imports as
#   arguments: the image tarballs (or layout folders), default
#     target/image/hcp-ingress-amd64.oci.tar target/image/hcp-ingress-arm64.oci.tar
# Paths are relative to the repository root, as in hack/build-image-tarball.sh.
# Prints the tarball's path; each platform's manifest digest goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-target/image/hcp-ingress.oci.tar}"
IMAGE="${IMAGE:-ghcr.io/hcp-ingress/hcp-ingress}"
TAG="${TAG:-dev}"
# Only the tar's entries carry a time: the images keep their own.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
if [ "$#" -eq 0 ]; then
  set -- target/image/hcp-ingress-amd64.oci.tar target/image/hcp-ingress-arm64.oci.tar
fi

fail() { echo "build-image-index: $*" >&2; exit 1; }
for input in "$@"; do
  [ -e "$input" ] || fail "$input is missing (ARCH=<its architecture> bash hack/build-image-tarball.sh writes it)"
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

tool="$(bash hack/install-tool.sh ociimage)"
# One "PLATFORM MANIFEST-DIGEST" line an image, then "NAME INDEX-DIGEST".
written="$("$tool" -index -out "$work/layout" -name "$IMAGE:$TAG" "$@")"
mapfile -t lines <<<"$written"
read -r name digest <<<"${lines[-1]}"
# shellcheck source=lib/layout-tar.sh
. hack/lib/layout-tar.sh
layout_tar "$work/layout" "$OUT" "$SOURCE_DATE_EPOCH"
for line in "${lines[@]:0:${#lines[@]}-1}"; do
  read -r platform manifest <<<"$line"
  echo "build-image-index: $platform manifest $manifest" >&2
done
echo "build-image-index: $OUT ($(du -h "$OUT" | cut -f1), sha256 $(sha256sum "$OUT" | cut -c1-64)): $name, index $digest" >&2
echo "$OUT"
