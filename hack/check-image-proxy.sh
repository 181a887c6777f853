#!/usr/bin/env bash
# The node proxy as the image builds it (release, static musl, fat LTO):
# it links, it runs, and it is what docs/security.md and docs/proxy.md say
# it is: a static PIE with RELRO and BIND_NOW, packed relative relocations,
# and the code that runs at start and on the data path grouped ahead of the
# rest (.text.hot, from link/proxy-text-order.txt, of which at least 90 %
# must still match: below, the list is stale and an idle proxy holds
# ~1.4 MiB more). Run by hack/test.sh; one release build, minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
T=x86_64-unknown-linux-musl
TD=${CARGO_TARGET_DIR:-target}
mkdir -p "$TD"
MAP="$(cd "$TD" && pwd)/hcp-ingress-proxy-$T.map"
rustup target list --installed | grep -qx "$T" || rustup target add "$T"
HCP_INGRESS_LINK_MAP="$MAP" cargo build --release --locked --target "$T" --bin hcp-ingress-proxy
BIN="$TD/$T/release/hcp-ingress-proxy"

fail() { echo "check-image-proxy: $BIN: $*" >&2; exit 1; }
"$BIN" --version >/dev/null || fail "does not run"
readelf -hW "$BIN" | grep -q 'Type: *DYN' || fail "not a position-independent executable"
! readelf -lW "$BIN" | grep -q INTERP || fail "has a program interpreter: not static"
readelf -lW "$BIN" | grep -q GNU_RELRO || fail "no RELRO segment"
readelf -dW "$BIN" | grep -q 'FLAGS.*BIND_NOW' || fail "not linked with -z now"
readelf -dW "$BIN" | grep -q '(RELR)' || fail "relative relocations not packed (-z pack-relative-relocs)"
python3 hack/bench/text_order.py check "$MAP" 0.9
# memcpy and memmove are crates/musl-memcpy's, not musl's (whose memcpy is
# slow on the record path's small copies): musl's objects never pulled in.
! grep -qE 'libc\.a\((memcpy|memmove)\.lo\)$' "$MAP" || fail "links musl's memcpy or memmove"
echo "check-image-proxy: $BIN: static PIE, RELRO, BIND_NOW, RELR, code layout, memcpy: ok" >&2
