#!/usr/bin/env bash
# Regenerate link/proxy-text-order.txt: the input sections of the node
# proxy's code that runs at start and on its data paths, which build.rs
# places together at the head of the image's binary (see docs/proxy.md,
# "Runtime and resources").
#
#   1. build the release musl proxy with symbols and a linker map;
#   2. run hack/bench-proxy.sh's memory phase (start, health checks,
#      requests and idle connections on the reencrypt, passthrough and
#      PROXY v2 paths) and a short hack/bench-proxy-pooled.sh (pods'
#      requests over the pooled mode's HTTP/2 upstream) with every proxy
#      under callgrind, which sees every function that runs, and list their
#      sections, hottest first;
#   3. relink with that list and run the same again natively under
#      `perf record -e page-faults`: code that faults outside the grouped
#      section (assembly picks other variants than under valgrind, which
#      hides CPU features; start-up code before valgrind's instrumentation)
#      is appended; repeated until no fault lands outside (at most ROUNDS, default 5).
#
# Takes 20-30 minutes on 2 cores (one full build, a relink per round).
# Needs valgrind, perf (linux-perf), binutils and hack/bench-proxy.sh's
# packages, the x86_64-unknown-linux-musl target and musl-tools. Regenerate when the
# proxy's dependencies or start-up change much: hack/bench-proxy.sh's
# idle VmRSS shows it (a stale list costs memory, never correctness).
# Env: TEXT_ORDER_TARGET_DIR (default target/text-order), ROUNDS, IDLE
# (idle connections per path, default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/bench/rig.sh
require valgrind perf nm readelf

T=x86_64-unknown-linux-musl
TD=${TEXT_ORDER_TARGET_DIR:-target/text-order}
LIST=link/proxy-text-order.txt
ROUNDS=${ROUNDS:-5}
mkdir -p "$TD"
TD=$(cd "$TD" && pwd)
G=$(mktemp -d /tmp/text-order.XXXXXX)
trap 'rm -rf "$G"' EXIT

build() {
  echo "gen-proxy-text-order: building ($1)" >&2
  HCP_INGRESS_LINK_MAP="$TD/proxy.map" CARGO_PROFILE_RELEASE_STRIP=none CARGO_TARGET_DIR="$TD" \
    cargo build --release --locked --target "$T" --bin hcp-ingress-proxy >&2
  BIN="$TD/$T/release/hcp-ingress-proxy"
  # The map and binary of this link, kept together for the analysis.
  cp "$TD/proxy.map" "$G/proxy.map"
  cp "$BIN" "$G/proxy"
}

# The benchmarks' short runs with every proxy under test under a wrapper:
# the default paths, then the opt-in pooled mode.
rig_paths() { # WRAPPER
  ONLY=mem IDLE="${IDLE:-100}" HCP_INGRESS="$G/proxy" PROXY_WRAP="$1" PROXY_WRAP_ALL=1 \
    bash hack/bench-proxy.sh > "$G/rig.log" 2>&1 || { cat "$G/rig.log" >&2; exit 1; }
}
rig_pooled() { # WRAPPER
  DURATION=1 REPS=1 POD_CONNS=20 HCP_INGRESS="$G/proxy" PROXY_WRAP="$1" \
    bash hack/bench-proxy-pooled.sh > "$G/rig-pooled.log" 2>&1 || { cat "$G/rig-pooled.log" >&2; exit 1; }
}
wrapper() { # NAME COMMAND...: a PROXY_WRAP script that execs COMMAND "$@"
  printf '#!/usr/bin/env bash\nexec %s "$@"\n' "${*:2}" > "$G/$1.sh"
  chmod +x "$G/$1.sh"
  echo "$G/$1.sh"
}

write_list() { # PATTERNS-FILE
  { grep '^#' "$LIST"; cat "$1"; } > "$G/list" && mv "$G/list" "$LIST"
}

build "current list"
echo "gen-proxy-text-order: the rigs under callgrind" >&2
callgrind() { echo "valgrind --tool=callgrind --demangle=no --callgrind-out-file=$G/cg.$1.%p"; }
rig_paths "$(wrapper cg-paths "$(callgrind paths)")"
rig_pooled "$(wrapper cg-pooled "$(callgrind pooled)")"
# The default paths' code first: a proxy that never pools must not have
# the pooled mode's code spread between the pages it uses.
python3 hack/bench/text_order.py callgrind "$G/proxy.map" "$G/proxy" "$G"/cg.paths.* > "$G/patterns"
python3 hack/bench/text_order.py callgrind "$G/proxy.map" "$G/proxy" "$G"/cg.pooled.* \
  | { grep -vxFf "$G/patterns" || true; } > "$G/pooled"
echo "gen-proxy-text-order: $(wc -l < "$G/patterns") sections ran on the default paths, $(wc -l < "$G/pooled") more in pooled mode" >&2
cat "$G/pooled" >> "$G/patterns"
write_list "$G/patterns"

for round in $(seq 1 "$ROUNDS"); do
  build "round $round"
  perf_wrap=$(wrapper "perf-$round" "perf record -q -e page-faults -c 1 -d -o $G/pf.$round.\$\$")
  rig_paths "$perf_wrap"
  rig_pooled "$perf_wrap"
  python3 hack/bench/text_order.py faults "$G/proxy.map" "$G/proxy" "$G"/pf."$round".* > "$G/more"
  # Only what the list does not hold yet (a pattern that matches nothing
  # in this build would fault again and again).
  grep -vxFf "$G/patterns" "$G/more" > "$G/new" || true
  echo "gen-proxy-text-order: round $round: $(wc -l < "$G/new") more sections faulted outside" >&2
  [ -s "$G/new" ] || break
  cat "$G/new" >> "$G/patterns"
  write_list "$G/patterns"
done
echo "gen-proxy-text-order: $LIST: $(grep -vc '^#' "$LIST") sections" >&2
