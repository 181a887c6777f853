#!/usr/bin/env bash
# The HAProxy Kubernetes Ingress Controller (haproxytech/kubernetes-ingress,
# the `haproxy` ingress class with `haproxy.org/ssl-passthrough`) as a real
# consumer of the Ingress hcp-ingress writes: builds what test/ingress's
# haproxytech test runs, once per version, into the consumers' cache
# (beside hack/consumers/build.sh's), then runs that test.
#   haproxy-<debian version>/bin/haproxy: Debian trixie's HAProxy source
#     package (the controller needs HAProxy >= 2.8; Debian 12 ships 2.6,
#     which stays installed for the other tests), built with bookworm's
#     toolchain and -dev packages;
#   haproxytech-<version>/bin/haproxy-ingress-controller: the controller,
#     from the Go module proxy.
# A second run with both present builds nothing.
#
# Usage: hack/consumers/haproxytech.sh                 build what is missing, run the test
#        hack/consumers/haproxytech.sh --build-only    build what is missing, print the cache root
#        hack/consumers/haproxytech.sh --print-bin-dir [haproxytech|haproxy]
#          prints a bin directory without building (default: the controller's)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
HAPROXYTECH_VERSION="${HCP_HAPROXYTECH_VERSION:-$HAPROXYTECH_VERSION}"
HAPROXY_VERSION="$HAPROXYTECH_HAPROXY_VERSION"
root="${HCP_CONSUMERS_CACHE:-$HOME/.cache/hcp-ingress/consumers}"
controller_bin="$root/haproxytech-$HAPROXYTECH_VERSION/bin"
haproxy_bin="$root/haproxy-$HAPROXY_VERSION/bin"

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  case "${2:-haproxytech}" in
    haproxytech) echo "$controller_bin" ;;
    haproxy) echo "$haproxy_bin" ;;
    *) echo "usage: $0 --print-bin-dir [haproxytech|haproxy]" >&2; exit 2 ;;
  esac
  exit 0
fi

log() { echo "hack/consumers/haproxytech.sh: $*" >&2; }
SUDO=""
[[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
# Debian's own pool: the source package's files by name (no deb-src line
# needed in the machine's apt sources).
pool="${HCP_DEBIAN_POOL:-http://deb.debian.org/debian/pool/main}/h/haproxy"

# fetch <file> <sha256> <dest dir>: one file of the source package, checked.
fetch() {
  local file="$1" sum="$2" dest="$3"
  if [[ ! -s "$dest/$file" ]] || ! echo "$sum  $dest/$file" | sha256sum -c --status; then
    curl -fsSL --retry 3 -o "$dest/$file.tmp" "$pool/$file" || {
      log "$pool/$file is not on Debian's mirror (a newer revision may have replaced $HAPROXY_VERSION: update HAPROXYTECH_HAPROXY_* in hack/consumers/versions.env from its .dsc)"
      exit 1
    }
    mv "$dest/$file.tmp" "$dest/$file"
  fi
  echo "$sum  $dest/$file" | sha256sum -c --status || { log "$file: sha256 is not $sum"; exit 1; }
}

# HAProxy as Debian's rules build it (TARGET=linux-glibc, OpenSSL, PCRE2
# with JIT, Lua 5.4, libslz, the Prometheus exporter), less what a process
# started by a test does not use and bookworm lacks or would add build time
# for: systemd notification, OpenTracing, jemalloc, QUIC (the test runs the
# controller with --disable-quic).
build_haproxy() {
  [[ -x "$haproxy_bin/haproxy" ]] && return
  local upstream="${HAPROXY_VERSION%-*}"
  local dir="$root/haproxy-$HAPROXY_VERSION/src"
  local missing=()
  for pkg in build-essential libssl-dev libpcre2-dev liblua5.4-dev libcrypt-dev curl patch; do
    dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
  mkdir -p "$root/haproxy-$HAPROXY_VERSION/dl" "$haproxy_bin"
  local dl="$root/haproxy-$HAPROXY_VERSION/dl"
  fetch "haproxy_$upstream.orig.tar.gz" "$HAPROXYTECH_HAPROXY_ORIG_SHA256" "$dl"
  fetch "haproxy_$HAPROXY_VERSION.debian.tar.xz" "$HAPROXYTECH_HAPROXY_DEBIAN_SHA256" "$dl"
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$dl/haproxy_$upstream.orig.tar.gz" -C "$dir" --strip-components=1
  tar -xJf "$dl/haproxy_$HAPROXY_VERSION.debian.tar.xz" -C "$dir"
  # Debian's quilt series, applied as dpkg-source would (blank lines and
  # comments skipped; debianize-dconv.patch is commented out there: docs only).
  local patch
  while read -r patch; do
    [[ -z "$patch" || "$patch" == \#* ]] && continue
    patch -d "$dir" -p1 --quiet --forward <"$dir/debian/patches/$patch"
  done <"$dir/debian/patches/series"
  log "building HAProxy $HAPROXY_VERSION (Debian trixie's source, a minute or two on 2 cores)"
  # VERSION/SUBVERS as Debian's rules set them, so `haproxy -v` names the
  # package revision it was built from.
  make -C "$dir" -j"$(nproc)" TARGET=linux-glibc \
    USE_OPENSSL=1 USE_PCRE2=1 USE_PCRE2_JIT=1 USE_SLZ=1 USE_PROMEX=1 \
    USE_LUA=1 LUA_INC=/usr/include/lua5.4 LUA_LIB_NAME=lua5.4 \
    IGNOREGIT=true VERSION="$upstream" SUBVERS="-${HAPROXY_VERSION##*-}" >"$dir/build.log" 2>&1 \
    || { tail -30 "$dir/build.log" >&2; log "HAProxy build failed (log: $dir/build.log)"; exit 1; }
  "$dir/haproxy" -vv >"$dir/haproxy-vv.txt"
  cp "$dir/haproxy" "$haproxy_bin/haproxy.tmp" && mv "$haproxy_bin/haproxy.tmp" "$haproxy_bin/haproxy"
}

# The controller as published: its go.mod has no replace lines and every
# dependency is on the proxy, so a wrapper module that requires it builds
# it. Its main package is the module root.
build_controller() {
  [[ -x "$controller_bin/haproxy-ingress-controller" ]] && return
  command -v go >/dev/null || { log "go is not installed"; exit 1; }
  # As hack/consumers/build.sh: the proxy is the source of truth here.
  export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
  local dir="$root/haproxytech-$HAPROXYTECH_VERSION/src"
  mkdir -p "$dir" "$controller_bin"
  printf 'module hcp-ingress.dev/haproxytech-build\n\ngo 1.26\n\nrequire github.com/haproxytech/kubernetes-ingress %s\n' \
    "$HAPROXYTECH_VERSION" >"$dir/go.mod"
  log "building the haproxytech ingress controller $HAPROXYTECH_VERSION (minutes on 2 cores the first time)"
  local pkg=github.com/haproxytech/kubernetes-ingress/pkg/version
  (cd "$dir" && go build -trimpath -ldflags "-s -w -X $pkg.GitTag=$HAPROXYTECH_VERSION" \
    -o "$controller_bin/haproxy-ingress-controller.tmp" github.com/haproxytech/kubernetes-ingress) \
    && mv "$controller_bin/haproxy-ingress-controller.tmp" "$controller_bin/haproxy-ingress-controller"
}

# How long a build took; a build that found its binary already built says
# nothing.
time_of() {
  local start=$SECONDS
  "$@"
  if ((SECONDS > start)); then log "$1: $((SECONDS - start)) s"; fi
}
time_of build_haproxy
time_of build_controller
if [[ "${1:-}" == "--build-only" ]]; then
  echo "$root"
  exit 0
fi

# Root: the test puts the tenant's backends on a veth in a network namespace.
cd "$here/../.."
exec nice -n 19 cargo test -p hcp-ingress --test ingress haproxytech
