#!/usr/bin/env bash
# Builds the pieces of a real Kubernetes node from the Go module proxy, once,
# into a cache outside the checkout (test/realnode starts them):
#   kubelet          KUBE_VERSION, built by hack/kube/build.sh --with-kubelet
#                    beside the control plane (one wrapper module and build
#                    cache), linked here;
#   containerd, ctr, containerd-shim-runc-v2
#                    CONTAINERD_VERSION; the snapshotters that need kernel
#                    features or C libraries this machine lacks are left out;
#   pause            the sandbox's init, compiled from kubernetes'
#                    build/pause/linux/pause.c, and pause.oci.tar, the pause
#                    image as containerd's CRI names it (PAUSE_IMAGE), packed
#                    by hack/ociimage: every pod's sandbox runs it.
#   apicall.oci.tar  the tests' in-cluster client (hack/node/apicall, the
#                    standard library only), static, as APICALL_IMAGE.
#   userpod.oci.tar  what the konnectivity test's user reaches with kubectl
#                    logs, exec and port-forward, and its pod's watch
#                    through the node proxy (hack/node/userpod, the
#                    standard library only), static, as USERPOD_IMAGE.
# runc and the CNI plugins come from Debian (hack/install-test-deps.sh).
# A second run with everything present returns at once; apicall and
# userpod are rebuilt when their source changed since (a hash of it is kept
# beside each binary): a cached image of an older program would lack what a
# newer test runs.
#
# HCP_KUBE_VERSION=<release> builds the kubelet of another release (the
# version matrix's workload floor, KUBE_VERSION_WORKLOAD_MIN: a kubelet is
# never newer than its API server).
#
# Usage: [HCP_KUBE_VERSION=v1.X.Y] hack/node/build.sh [--print-bin-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../kube/versions.env
. "$here/../kube/versions.env"
KUBE_VERSION="${HCP_KUBE_VERSION:-$KUBE_VERSION}"
cache="${HCP_NODE_CACHE:-$HOME/.cache/hcp-ingress/node}/$KUBE_VERSION-containerd-$CONTAINERD_VERSION"
bin="$cache/bin"
if [[ "${1:-}" == "--print-bin-dir" ]]; then echo "$bin"; exit 0; fi

# The hash of a test program's source, and the stamp its build left.
source_sum() { cat "$here/$1"/go.mod "$here/$1"/*.go | sha256sum | cut -d' ' -f1; }
for prog in apicall userpod; do
  if [[ "$(cat "$bin/$prog.src-sha256" 2>/dev/null)" != "$(source_sum "$prog")" ]]; then
    rm -f "$bin/$prog" "$bin/$prog.oci.tar"
  fi
done

want=(kubelet containerd ctr containerd-shim-runc-v2 pause pause.oci.tar apicall.oci.tar userpod.oci.tar)
missing=0
# Programs are executable; the image tarballs are not, only present.
for b in "${want[@]}"; do
  if [[ "$b" == *.oci.tar ]]; then [[ -s "$bin/$b" ]] || missing=1; else [[ -x "$bin/$b" ]] || missing=1; fi
done
if [[ $missing == 0 ]]; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "hack/node/build.sh: go is not installed" >&2; exit 1; }
mkdir -p "$bin"
# The tests' client image: not pulled from anywhere, imported.
APICALL_IMAGE=hcp-ingress.test/apicall:v1
USERPOD_IMAGE=hcp-ingress.test/userpod:v1
export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="-mod=mod" GOTOOLCHAIN=local
log() { echo "hack/node/build.sh: $*" >&2; }

build_kubelet() {
  # hack/kube/build.sh builds it beside the control plane of its release.
  local kube_bin; kube_bin="$(HCP_KUBE_VERSION="$KUBE_VERSION" bash "$here/../kube/build.sh" --with-kubelet)"
  ln -sf "$kube_bin/kubelet" "$bin/kubelet"
}

build_containerd() {
  # One build for every kubelet release: linked into each one's folder.
  local shared="${HCP_NODE_CACHE:-$HOME/.cache/hcp-ingress/node}/containerd-$CONTAINERD_VERSION"
  local dir="$shared/src"
  mkdir -p "$dir" "$shared/bin"
  printf 'module hcp-ingress.dev/containerd-build\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 %s\n' \
    "$CONTAINERD_VERSION" >"$dir/go.mod"
  local pkg=github.com/containerd/containerd/v2
  local ldflags="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION"
  local cmds=(containerd ctr containerd-shim-runc-v2) pkgs=() cmd
  for cmd in "${cmds[@]}"; do [[ -x "$shared/bin/$cmd" ]] || pkgs+=("$pkg/cmd/$cmd"); done
  if (( ${#pkgs[@]} )); then
    # One `go build` for all three, linked side by side.
    log "building ${pkgs[*]##*/} $CONTAINERD_VERSION"
    rm -rf "$shared/bin/.build" && mkdir -p "$shared/bin/.build"
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs no_aufs" \
      -ldflags "$ldflags" -o "$shared/bin/.build/" "${pkgs[@]}")
    for cmd in "${pkgs[@]##*/}"; do mv "$shared/bin/.build/$cmd" "$shared/bin/$cmd"; done
    rmdir "$shared/bin/.build"
  fi
  for cmd in "${cmds[@]}"; do ln -sf "$shared/bin/$cmd" "$bin/$cmd"; done
}

build_pause() {
  [[ -x "$bin/pause" ]] && return
  local module; module="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  local src="$module/build/pause/linux/pause.c"
  [[ -f "$src" ]] || { echo "hack/node/build.sh: $src is missing" >&2; exit 1; }
  log "compiling pause from $src"
  # Static, as in the pause image; musl-gcc from Debian's musl-tools.
  musl-gcc -Os -static -DVERSION="$KUBE_VERSION" -o "$bin/pause.tmp" "$src" && mv "$bin/pause.tmp" "$bin/pause"
}

# pack <tarball> <image name> <binary> <user>: a one-file image (the binary
# at /<its name>, its entrypoint) as an OCI layout in a tar.
pack() {
  local out="$1" name="$2" file="$3" user="$4"
  [[ -s "$out" ]] && return
  local tool work; tool="$(bash "$here/../install-tool.sh" ociimage)"; work="$(mktemp -d)"
  "$tool" -out "$work/layout" -name "$name" -created 0 -os linux -arch amd64 \
    -created-by hack/node/build.sh -entry "file /$(basename "$file") 0755 0:0 $file" \
    -user "$user" -entrypoint "/$(basename "$file")" >/dev/null
  tar --create --file "$out.tmp" --directory "$work/layout" --sort=name \
    --owner=0 --group=0 --numeric-owner oci-layout index.json blobs
  rm -rf "$work"
  mv "$out.tmp" "$out"
}

build_apicall() {
  [[ -x "$bin/apicall" ]] && return
  log "building apicall"
  (cd "$here/apicall" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/apicall.tmp" .) \
    && mv "$bin/apicall.tmp" "$bin/apicall"
}

build_userpod() {
  [[ -x "$bin/userpod" ]] && return
  log "building userpod"
  (cd "$here/userpod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/userpod.tmp" .) \
    && mv "$bin/userpod.tmp" "$bin/userpod"
}

build_kubelet
build_containerd
build_pause
build_apicall
build_userpod
# As the upstream pause image: the binary at /pause, run as 65535.
pack "$bin/pause.oci.tar" "$PAUSE_IMAGE" "$bin/pause" 65535:65535
pack "$bin/apicall.oci.tar" "$APICALL_IMAGE" "$bin/apicall" 65532:65532
pack "$bin/userpod.oci.tar" "$USERPOD_IMAGE" "$bin/userpod" 65532:65532
for prog in apicall userpod; do source_sum "$prog" >"$bin/$prog.src-sha256"; done
echo "$bin"
