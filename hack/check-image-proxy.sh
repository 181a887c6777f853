#!/usr/bin/env bash
# The node proxy as the image builds it (release, static musl, fat LTO):
# it links, it runs, and it is what docs/security.md and docs/proxy.md say
# it is: a static PIE with RELRO and BIND_NOW and packed relative
# relocations, with one crypto provider (aws-lc) and no ring linked in.
# Run by hack/test.sh; one release build, minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
T=x86_64-unknown-linux-musl
TD=${CARGO_TARGET_DIR:-target}
rustup target list --installed | grep -qx "$T" || rustup target add "$T"
cargo build --release --locked --target "$T" --bin hcp-ingress-proxy
BIN="$TD/$T/release/hcp-ingress-proxy"

fail() { echo "check-image-proxy: $BIN: $*" >&2; exit 1; }
"$BIN" --version >/dev/null || fail "does not run"
readelf -hW "$BIN" | grep -q 'Type: *DYN' || fail "not a position-independent executable"
! readelf -lW "$BIN" | grep -q INTERP || fail "has a program interpreter: not static"
readelf -lW "$BIN" | grep -q GNU_RELRO || fail "no RELRO segment"
readelf -dW "$BIN" | grep -q 'FLAGS.*BIND_NOW' || fail "not linked with -z now"
readelf -dW "$BIN" | grep -q '(RELR)' || fail "relative relocations not packed (-z pack-relative-relocs)"
# One crypto provider: what the package links (its normal dependencies, for
# the image's target) has aws-lc and no ring; the binary is stripped, so the
# graph is what can be read.
tree=$(cargo tree --locked -p hcp-ingress --target "$T" -e normal --prefix none)
grep -q '^aws-lc-rs ' <<<"$tree" || fail "aws-lc-rs is not in its dependency graph"
if grep -q '^ring ' <<<"$tree"; then
  fail "ring is in its dependency graph: $(cargo tree --locked -p hcp-ingress --target "$T" -e normal -i ring | head -5)"
fi
echo "check-image-proxy: $BIN: static PIE, RELRO, BIND_NOW, RELR, aws-lc without ring: ok" >&2
