#!/usr/bin/env bash
# Fuzz the proxy's parsers with cargo-fuzz (libFuzzer) on the stable toolchain.
#   bash hack/fuzz.sh                     # every target, 300 s each
#   bash hack/fuzz.sh client_hello 1800   # one target, 30 minutes
# Targets: client_hello, proxy_v2_roundtrip, proxy_config
# (crates/proxy/fuzz/fuzz_targets/; paths below are under crates/proxy/).
# New inputs go to fuzz/corpus-work/<target>/ (ignored by git); the committed
# seeds in fuzz/corpus/<target>/ are only read. Crashes land in
# fuzz/artifacts/<target>/: add each as a unit-test regression case.
# One process per target (libFuzzer's default): the machine is shared.
# FUZZ_SANITIZER=none skips AddressSanitizer (faster; the crate has no unsafe).
set -euo pipefail
cd "$(dirname "$0")/../crates/proxy/fuzz"
targets=(client_hello proxy_v2_roundtrip proxy_config)
if [ $# -ge 1 ] && [ "$1" != all ]; then
  targets=("$1")
fi
seconds=${2:-300}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
# cargo-fuzz passes -Z flags; stable rustc accepts them with RUSTC_BOOTSTRAP.
export RUSTC_BOOTSTRAP=1
# Its own target dir: the instrumented build shares nothing with the workspace's.
unset CARGO_TARGET_DIR
sanitizer=${FUZZ_SANITIZER:-address}
for t in "${targets[@]}"; do
  mkdir -p "corpus-work/$t"
  echo "hack/fuzz.sh: $t for ${seconds}s (sanitizer $sanitizer)" >&2
  cargo fuzz run --sanitizer "$sanitizer" -O --debug-assertions "$t" \
    "corpus-work/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1
done
