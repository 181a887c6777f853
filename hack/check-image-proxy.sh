#!/usr/bin/env bash
# The image's binaries as the image builds them (release, static musl, fat
# LTO, `cargo auditable`), for ARCH (amd64, the default, or arm64): they
# link, they run (arm64 under Debian's qemu-user-static), and they are what
# docs/security.md and docs/proxy.md say they are: static executables with
# RELRO, and on amd64 static PIEs with BIND_NOW and packed relative
# relocations (rustc's aarch64 musl target links no static PIE), with one
# crypto provider (aws-lc) and no ring linked in, carrying their dependency
# list (.dep-v0) where image scanners read it, and the node binary's list
# names only the proxy's crates: no kube, no k8s-openapi, nothing the proxy
# crate does not depend on. Prints the folder holding them, which
# hack/build-image-tarball.sh packs.
# Run by hack/test.sh; two release builds, minutes. arm64 cross-compiles
# with Debian's gcc-aarch64-linux-gnu (C dependencies: aws-lc, mimalloc) as
# compiler and linker, as the Dockerfile's build stage does.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH="${ARCH:-amd64}"
run=() objcopy=objcopy
case "$ARCH" in
  amd64) T=x86_64-unknown-linux-musl; machine='Advanced Micro Devices X86-64' ;;
  arm64)
    # shellcheck source=lib/arm64-env.sh
    . hack/lib/arm64-env.sh
    T=$ARM64_TARGET machine=AArch64
    export "${ARM64_BUILD_ENV[@]}"
    for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-objcopy "$ARM64_RUNNER"; do
      command -v "$tool" >/dev/null || { echo "check-image-proxy: ARCH=arm64 needs $tool (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)" >&2; exit 1; }
    done
    # The host's objcopy reads only its own architecture's files.
    run=("$ARM64_RUNNER") objcopy=aarch64-linux-gnu-objcopy ;;
  *) echo "check-image-proxy: ARCH=$ARCH: amd64 or arm64" >&2; exit 1 ;;
esac
TD=${CARGO_TARGET_DIR:-target}
rustup target list --installed | grep -qx "$T" || rustup target add "$T"
# The version the Dockerfile installs too (test/release/image.rs compares them).
auditable="$(bash hack/install-tool.sh cargo-auditable)"
# gcc writes SOURCE_DATE_EPOCH for __DATE__ and __TIME__ (mimalloc prints its
# build time): the commit's time, so a cold build of a commit gives the same
# binaries, as the Dockerfile's build does.
# Each binary in a cargo run of its own package (the Dockerfile's two runs):
# one run resolves features for all the packages it builds, so built beside
# the controller the node binary would link what the controller's features
# turn on in shared crates (hyper-util's client, ...).
for pkg in hcp-ingress-proxy hcp-ingress; do
  SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}" PATH="$(dirname "$auditable"):$PATH" \
    cargo auditable build --release --locked --target "$T" -p "$pkg" --bin "$pkg" >&2
done
DIR="$TD/$T/release"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for BIN in "$DIR/hcp-ingress" "$DIR/hcp-ingress-proxy"; do
  fail() { echo "check-image-proxy: $BIN: $*" >&2; exit 1; }
  # Each binary is its package's: hcp-ingress-proxy is crates/proxy.
  pkg="$(basename "$BIN")"
  version="$(cargo metadata --locked --no-deps --format-version 1 \
    | python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]))' "$pkg")"

  # One crypto provider: what the package links (its normal dependencies,
  # for the image's target) has aws-lc and no ring.
  tree=$(cargo tree --locked -p "$pkg" --target "$T" -e normal --prefix none)
  grep -q '^aws-lc-rs ' <<<"$tree" || fail "aws-lc-rs is not in the dependency graph of $pkg"
  if grep -q '^ring ' <<<"$tree"; then
    fail "ring is in the dependency graph of $pkg: $(cargo tree --locked -p "$pkg" --target "$T" -e normal -i ring | head -5)"
  fi
  # What is linked: normal dependencies, without the proc-macros that only
  # run at build time; and what the build used at all (proc-macros and
  # build scripts' dependencies too); "name version" lines.
  cargo tree --locked -p "$pkg" --target "$T" -e normal,no-proc-macro --prefix none -f '{p}' \
    | awk '{print $1, substr($2, 2)}' | sort -u >"$scratch/linked"
  cargo tree --locked -p "$pkg" --target "$T" -e normal,build --prefix none -f '{p}' \
    | awk '{print $1, substr($2, 2)}' | sort -u >"$scratch/built"

  "${run[@]}" "$BIN" --version >/dev/null || fail "does not run"
  readelf -hW "$BIN" | grep -q "Machine: *$machine\$" || fail "not an $ARCH binary: $(readelf -hW "$BIN" | grep Machine:)"
  ! readelf -lW "$BIN" | grep -q INTERP || fail "has a program interpreter: not static"
  readelf -lW "$BIN" | grep -q GNU_RELRO || fail "no RELRO segment"
  if [[ "$ARCH" == amd64 ]]; then
    readelf -hW "$BIN" | grep -q 'Type: *DYN' || fail "not a position-independent executable"
    readelf -dW "$BIN" | grep -q 'FLAGS.*BIND_NOW' || fail "not linked with -z now"
    readelf -dW "$BIN" | grep -q '(RELR)' || fail "relative relocations not packed (-z pack-relative-relocs)"
  fi
  # What Trivy, Grype and Syft read in a Rust binary: the section cargo
  # auditable writes, zlib-compressed JSON of the packages built into it.
  # The binaries are stripped, so it is also the only list they carry.
  readelf -SW "$BIN" | grep -q ' \.dep-v0 ' || fail "no .dep-v0 section: not built with cargo auditable"
  "$objcopy" --dump-section .dep-v0="$scratch/dep-v0" "$BIN" "$scratch/copy"
  # Nothing linked may be missing from the list. For the node binary, also
  # nothing else may be on it: no Kubernetes crate, nothing its package
  # does not build. cargo auditable 0.7 lists what `cargo metadata`
  # resolves, which unifies features over the whole workspace
  # (rust-secure-code/cargo-auditable#66) and names optional dependencies
  # of weak features (rustls-webpki's "ring?/alloc"): the few crates that
  # adds are named below, each for its reason, so that any other one fails.
  python3 -c '
import json, sys, zlib
pkg, version, section, linked, built = sys.argv[1:]
packages = json.loads(zlib.decompress(open(section, "rb").read()))["packages"]
every = {p["name"] + " " + p["version"] for p in packages}
listed = {p["name"] + " " + p["version"] for p in packages if p.get("kind", "runtime") == "runtime"}
root = [p["name"] + " " + p["version"] for p in packages if p.get("root")]
linked = set(open(linked).read().splitlines())
built = set(open(built).read().splitlines())
problems = []
if root != [pkg + " " + version]:
    problems.append("its root package is %s, want %s %s" % (root, pkg, version))
if linked - listed:
    problems.append("linked but not listed: " + ", ".join(sorted(linked - listed)))
if pkg == "hcp-ingress-proxy":
    kube = sorted(p for p in every if p.split()[0] in ("k8s-openapi", "kube") or p.startswith("kube-"))
    if kube:
        problems.append("Kubernetes crates listed: " + ", ".join(kube))
    # Listed by cargo metadata, not built: ring (and its untrusted and
    # getrandom 0.2) through the weak feature; the rest are turned on in
    # shared crates by the controller or by dev-dependencies.
    metadata_only = {"ring", "untrusted", "getrandom", "tower-service", "aho-corasick",
                     "allocator-api2", "foldhash", "jiff-static"}
    foreign = sorted(p for p in every - built if p.split()[0] not in metadata_only)
    if foreign:
        problems.append("listed but not a dependency of %s: %s" % (pkg, ", ".join(foreign)))
print("; ".join(problems) or "%d packages (%d runtime), all %d linked" % (len(every), len(listed), len(linked)))
sys.exit(1 if problems else 0)
' "$pkg" "$version" "$scratch/dep-v0" "$scratch/linked" "$scratch/built" >"$scratch/said" || fail ".dep-v0: $(cat "$scratch/said")"
  what="static PIE, RELRO, BIND_NOW, RELR"
  [[ "$ARCH" == amd64 ]] || what="static $machine, RELRO"
  echo "check-image-proxy: $BIN ($(stat -c %s "$BIN") bytes): $what, aws-lc without ring, .dep-v0 lists $(cat "$scratch/said"): ok" >&2
done
echo "$DIR"
