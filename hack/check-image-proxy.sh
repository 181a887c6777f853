#!/usr/bin/env bash
# The image's binaries as the image builds them (release, static musl, fat
# LTO, `cargo auditable`): they link, they run, and they are what
# docs/security.md and docs/proxy.md say they are: static PIEs with RELRO and
# BIND_NOW and packed relative relocations, with one crypto provider (aws-lc)
# and no ring linked in, carrying their dependency list (.dep-v0) where image
# scanners read it. Prints the folder holding them, which
# hack/build-image-tarball.sh packs: one build for both.
# Run by hack/test.sh; one release build, minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
T=x86_64-unknown-linux-musl
TD=${CARGO_TARGET_DIR:-target}
rustup target list --installed | grep -qx "$T" || rustup target add "$T"
# The version the Dockerfile installs too (test/release/image.rs compares them).
auditable="$(bash hack/install-tool.sh cargo-auditable)"
# gcc writes SOURCE_DATE_EPOCH for __DATE__ and __TIME__ (mimalloc prints its
# build time): the commit's time, so a cold build of a commit gives the same
# binaries, as the Dockerfile's build does.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}" PATH="$(dirname "$auditable"):$PATH" \
  cargo auditable build --release --locked --target "$T" --bin hcp-ingress --bin hcp-ingress-proxy >&2
DIR="$TD/$T/release"

# One crypto provider: what the package links (its normal dependencies, for
# the image's target) has aws-lc and no ring.
tree=$(cargo tree --locked -p hcp-ingress --target "$T" -e normal --prefix none)
grep -q '^aws-lc-rs ' <<<"$tree" || { echo "check-image-proxy: aws-lc-rs is not in the dependency graph" >&2; exit 1; }
if grep -q '^ring ' <<<"$tree"; then
  echo "check-image-proxy: ring is in the dependency graph: $(cargo tree --locked -p hcp-ingress --target "$T" -e normal -i ring | head -5)" >&2
  exit 1
fi

crate_version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# What is linked: normal dependencies, without the proc-macros that only run
# at build time; "name version" lines.
cargo tree --locked -p hcp-ingress --target "$T" -e normal,no-proc-macro --prefix none -f '{p}' \
  | awk '{print $1, substr($2, 2)}' | sort -u >"$scratch/linked"
for BIN in "$DIR/hcp-ingress" "$DIR/hcp-ingress-proxy"; do
  fail() { echo "check-image-proxy: $BIN: $*" >&2; exit 1; }
  "$BIN" --version >/dev/null || fail "does not run"
  readelf -hW "$BIN" | grep -q 'Type: *DYN' || fail "not a position-independent executable"
  ! readelf -lW "$BIN" | grep -q INTERP || fail "has a program interpreter: not static"
  readelf -lW "$BIN" | grep -q GNU_RELRO || fail "no RELRO segment"
  readelf -dW "$BIN" | grep -q 'FLAGS.*BIND_NOW' || fail "not linked with -z now"
  readelf -dW "$BIN" | grep -q '(RELR)' || fail "relative relocations not packed (-z pack-relative-relocs)"
  # What Trivy, Grype and Syft read in a Rust binary: the section cargo
  # auditable writes, zlib-compressed JSON of the packages built into it.
  # The binaries are stripped, so it is also the only list they carry.
  readelf -SW "$BIN" | grep -q ' \.dep-v0 ' || fail "no .dep-v0 section: not built with cargo auditable"
  objcopy --dump-section .dep-v0="$scratch/dep-v0" "$BIN" "$scratch/copy"
  # cargo auditable lists what `cargo metadata` resolves, a little more than
  # is linked (proc-macros, and optional dependencies named by weak features
  # such as rustls-webpki's "ring?/alloc": ring is listed, not linked), so
  # the check is that nothing linked is missing.
  python3 -c '
import json, sys, zlib
version, section, linked = sys.argv[1:]
packages = json.loads(zlib.decompress(open(section, "rb").read()))["packages"]
listed = {p["name"] + " " + p["version"] for p in packages if p.get("kind", "runtime") == "runtime"}
root = [p["name"] + " " + p["version"] for p in packages if p.get("root")]
linked = set(open(linked).read().splitlines())
problems = []
if root != ["hcp-ingress " + version]:
    problems.append("its root package is %s, want hcp-ingress %s" % (root, version))
if linked - listed:
    problems.append("linked but not listed: " + ", ".join(sorted(linked - listed)))
print("; ".join(problems) or "%d packages, all %d linked" % (len(listed), len(linked)))
sys.exit(1 if problems else 0)
' "$crate_version" "$scratch/dep-v0" "$scratch/linked" >"$scratch/said" || fail ".dep-v0: $(cat "$scratch/said")"
  echo "check-image-proxy: $BIN: static PIE, RELRO, BIND_NOW, RELR, aws-lc without ring, .dep-v0 lists $(cat "$scratch/said"): ok" >&2
done
echo "$DIR"
