#!/usr/bin/env bash
# Benchmark of the management-side controller (issue 5): N ControlPlaneIngresses
# (haproxy, nginx, traefik and gateway flavors, each with its CAPI Cluster) on
# the in-memory API server (memkube, in a child process, with the upstream
# CRDs of ../shared/schemas and ours) with latency added to every request.
# Prints, for each N: time to converge (every ControlPlaneIngress RouteReady=True
# at its current generation), API requests per cluster during convergence,
# writes during one resync period at steady state, and the controller
# process's peak RSS (VmHWM), against the targets of issue 5:
# 1,000 converge in < 60 s on 2 cores, 0 writes per resync, < 200 MiB RSS.
#
# Env: NS_LIST (default "100 1000"), LATENCY_MS (default 5), RESYNC_SECS
#      (default 10), CONCURRENCY (default: the controller's), SCHEMAS
#      (default ../shared/schemas), BENCH_CONTROLLER (binary; default: cargo
#      build --release -p bench-controller).
set -euo pipefail
cd "$(dirname "$0")/.."

NS_LIST=${NS_LIST:-"100 1000"}
LATENCY_MS=${LATENCY_MS:-5}
RESYNC_SECS=${RESYNC_SECS:-10}
SCHEMAS=${SCHEMAS:-../shared/schemas}

if [ -z "${BENCH_CONTROLLER:-}" ]; then
  cargo build --release -p bench-controller >&2
  BENCH_CONTROLLER="${CARGO_TARGET_DIR:-target}/release/bench-controller"
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

args=(--latency-ms "$LATENCY_MS" --resync-secs "$RESYNC_SECS" --schemas "$SCHEMAS")
for n in $NS_LIST; do args+=(--n "$n"); done
if [ -n "${CONCURRENCY:-}" ]; then args+=(--concurrency "$CONCURRENCY"); fi
exec "$BENCH_CONTROLLER" "${args[@]}"
