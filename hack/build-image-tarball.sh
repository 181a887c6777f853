#!/usr/bin/env bash
# The image without Docker: the Dockerfile's final stage, for linux/$ARCH
# (amd64, the default, or arm64), as an OCI image layout in a tar (`ctr -n k8s.io images import`, `skopeo copy
# oci-archive:...`), from the static musl binaries that
# hack/check-image-proxy.sh builds and checks (one build for both scripts).
# The layout stands in for gcr.io/distroless/static-debian12:nonroot: its
# /etc/passwd and /etc/group (hack/image/), its home folders and /tmp, Debian's
# CA certificates, its PATH, SSL_CERT_FILE and working folder. Every entry has
# the same modification time (SOURCE_DATE_EPOCH, default: HEAD's commit time),
# so the same binaries at the same commit give the same digest.
# `cargo test --test release` (image.rs) fails when this and the Dockerfile differ.
#
#   ARCH=amd64                                   the platform: amd64 or arm64
#   OUT=target/image/hcp-ingress-$ARCH.oci.tar   the tarball to write
#   (hack/build-image-index.sh puts both platforms' in one image index)
#   IMAGE=ghcr.io/hcp-ingress/hcp-ingress        repository, and TAG=dev: the name it imports as
#   BIN_DIR=...        hcp-ingress and hcp-ingress-proxy from there instead of
#                      building them (default: hack/check-image-proxy.sh's build
#                      for ARCH)
#   CA_BUNDLE=...      the CA bundle (default: built from the certificates of
#                      Debian's ca-certificates package, as distroless does; the
#                      host's own /etc/ssl/certs bundle may hold local CAs)
# Prints the tarball's path; the manifest digest and sizes go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCH="${ARCH:-amd64}"
case "$ARCH" in amd64|arm64) ;; *) echo "build-image-tarball: ARCH=$ARCH: amd64 or arm64" >&2; exit 1 ;; esac
OUT="${OUT:-target/image/hcp-ingress-$ARCH.oci.tar}"
IMAGE="${IMAGE:-ghcr.io/hcp-ingress/hcp-ingress}"
TAG="${TAG:-dev}"
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
REVISION="${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
BIN_DIR="${BIN_DIR:-$(ARCH="$ARCH" bash hack/check-image-proxy.sh)}"

fail() { echo "build-image-tarball: $*" >&2; exit 1; }
for bin in hcp-ingress hcp-ingress-proxy; do
  [ -x "$BIN_DIR/$bin" ] || fail "$BIN_DIR/$bin is missing or not executable"
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -z "${CA_BUNDLE:-}" ]; then
  # The package's own files, unchanged since it was installed, concatenated
  # in name order as update-ca-certificates does on a fresh system.
  dpkg --verify ca-certificates || fail "Debian's ca-certificates is missing or its files were changed"
  mapfile -t certs < <(dpkg -L ca-certificates | grep '^/usr/share/ca-certificates/mozilla/.*\.crt$' | LC_ALL=C sort)
  [ "${#certs[@]}" -gt 0 ] || fail "Debian's ca-certificates holds no certificate"
  awk 1 "${certs[@]}" >"$work/ca-certificates.crt"
  CA_BUNDLE="$work/ca-certificates.crt"
  ca_from="ca-certificates $(dpkg-query -W -f='${Version}' ca-certificates), ${#certs[@]} certificates"
  # Its licence travels with it, as in distroless.
  extra=(-entry "file /usr/share/doc/ca-certificates/copyright 0644 0:0 /usr/share/doc/ca-certificates/copyright")
else
  ca_from="$CA_BUNDLE"
  extra=()
fi

# What the Dockerfile's LABELs say, and what hack/build-image.sh adds.
labels=(
  org.opencontainers.image.title=hcp-ingress
  "org.opencontainers.image.description=Cluster API add-on provider: hosted control planes behind one shared SNI-passthrough ingress"
  org.opencontainers.image.licenses=Apache-2.0
  org.opencontainers.image.source=https://github.com/hcp-ingress/hcp-ingress
  "org.opencontainers.image.version=$TAG"
  "org.opencontainers.image.revision=$REVISION"
)
args=(
  -out "$work/layout" -name "$IMAGE:$TAG" -created "$SOURCE_DATE_EPOCH" -os linux -arch "$ARCH"
  -created-by "hack/build-image-tarball.sh"
  # The Dockerfile's COPYs: root-owned, readable and executable by all.
  -entry "file /hcp-ingress 0755 0:0 $BIN_DIR/hcp-ingress"
  -entry "file /hcp-ingress-proxy 0755 0:0 $BIN_DIR/hcp-ingress-proxy"
  # distroless/static-debian12:nonroot.
  -entry "file /etc/passwd 0644 0:0 hack/image/passwd"
  -entry "file /etc/group 0644 0:0 hack/image/group"
  -entry "file /etc/ssl/certs/ca-certificates.crt 0644 0:0 $CA_BUNDLE"
  -entry "dir /tmp 1777 0:0"
  -entry "dir /root 0700 0:0"
  -entry "dir /home 0755 0:0"
  -entry "dir /home/nonroot 0700 65532:65532"
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  -env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  -workdir /home/nonroot
  # The Dockerfile's USER, ENTRYPOINT and CMD.
  -user 65532:65532 -entrypoint /hcp-ingress -cmd controller
)
for label in "${labels[@]}"; do args+=(-label "$label"); done
args+=("${extra[@]}")

tool="$(bash hack/install-tool.sh ociimage)"
written="$("$tool" "${args[@]}")"
read -r name digest <<<"$written"
# shellcheck source=lib/layout-tar.sh
. hack/lib/layout-tar.sh
layout_tar "$work/layout" "$OUT" "$SOURCE_DATE_EPOCH"
echo "build-image-tarball: $OUT ($(du -h "$OUT" | cut -f1), sha256 $(sha256sum "$OUT" | cut -c1-64)): $name, manifest $digest, linux/$ARCH; CA certificates from $ca_from" >&2
echo "$OUT"
