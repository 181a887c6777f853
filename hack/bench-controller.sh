#!/usr/bin/env bash
# Benchmark of the controller: N ControlPlaneIngresses (haproxy, nginx,
# traefik and gateway flavors, each with its CAPI Cluster) on the in-memory
# API server (memkube, in a child process, with the upstream CRDs of
# ../shared/schemas and ours, latency added to every request) and on a real
# kube-apiserver (hack/kube/build.sh), side by side in one table; with
# WORKLOADS=1 each cluster also has its workload side (an in-memory workload
# API server behind `<cluster>-kubeconfig`, the cluster CA, a stand-in
# kubelet; the workload API servers are tenants of one memkube host, about
# 130 KiB each, so 5,000 fit in a few hundred MB), a stand-in Gateway
# controller accepts the TLSRoutes, and converging means route ready,
# endpoints steered and CCM set.
# Prints, for each N: time to converge (every ControlPlaneIngress RouteReady=True
# at its current generation), API requests per cluster during convergence,
# writes during one resync period at steady state, the controller process's
# peak RSS (VmHWM), and a leader hand-over (a second replica campaigns, the
# leader stops and releases its Lease; the time until the new leader has
# reconciled every cluster, and its writes until then), against targets:
# 1,000 converge in < 60 s within 150 MiB, 5,000 in < 180 s within 400 MiB,
# on 2 cores, 0 writes per resync and across the hand-over, requests per
# cluster no more than at 1,000. On the real API server it also prints
# kube-apiserver's and etcd's CPU and kube-apiserver's peak RSS.
# test/bench-controller/tests/small_run.rs runs N=200 in the tests.
#
# Env: NS_LIST (default "100 1000"; "1000 5000" for the 5,000 target), API (default "memkube real"), WORKLOADS
#      (default 1), LATENCY_MS (memkube only, default 5), RESYNC_SECS
#      (default 180, the 5,000 target's convergence time: a convergence within
#      the target then holds no resync pass, as with the controller's default
#      of 300 s, and its requests per cluster are the convergence's own (at
#      60 s, 5,000 clusters converging in 100 s counted 0.46 resync passes
#      per cluster in their requests); the steady window is one period
#      plus 5 s), CONCURRENCY (default: the controller's),
#      SHARDS (default 1; 2: two controllers with --watch-filter shard-0 and
#      shard-1, cluster i labelled for shard i % 2, requests about the other
#      shard's clusters counted; no hand-over), SCHEMAS
#      (default ../shared/schemas), BENCH_CONTROLLER (binary; default: cargo
#      build --profile load -p bench-controller: optimised, without fat LTO).
set -euo pipefail
cd "$(dirname "$0")/.."

NS_LIST=${NS_LIST:-"100 1000"}
API=${API:-"memkube real"}
WORKLOADS=${WORKLOADS:-1}
LATENCY_MS=${LATENCY_MS:-5}
RESYNC_SECS=${RESYNC_SECS:-180}
SCHEMAS=${SCHEMAS:-../shared/schemas}

if [ -z "${BENCH_CONTROLLER:-}" ]; then
  cargo build --profile load -p bench-controller >&2
  BENCH_CONTROLLER="${CARGO_TARGET_DIR:-target}/load/bench-controller"
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

case " $API " in *" real "*) bash hack/kube/build.sh >/dev/null ;; esac
args=(--latency-ms "$LATENCY_MS" --resync-secs "$RESYNC_SECS" --schemas "$SCHEMAS")
for n in $NS_LIST; do args+=(--n "$n"); done
for api in $API; do args+=(--api "$api"); done
if [ "$WORKLOADS" = 1 ]; then args+=(--workloads); fi
if [ -n "${CONCURRENCY:-}" ]; then args+=(--concurrency "$CONCURRENCY"); fi
if [ -n "${SHARDS:-}" ]; then args+=(--shards "$SHARDS"); fi
exec "$BENCH_CONTROLLER" "${args[@]}"
