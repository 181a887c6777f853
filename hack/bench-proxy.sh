#!/usr/bin/env bash
# Benchmark `hcp-ingress proxy` against its anchor, HAProxy, in ONE run on
# the same machine, against the same tenant stand-ins and shared ingress
# (rig of ../shared/PERF.md), all on loopback. Three paths, each next to the
# HAProxy config that does the same work:
#
#   reencrypt (no SNI, as pods dial the service IP):
#     127.0.0.2:7443 HAProxy, k0smotron's sidecar config, RSA-2048 leaf (THE anchor)
#     127.0.0.2:7444 HAProxy, same config, ECDSA P-256 leaf (ECDSA_ANCHOR=1)
#     127.0.0.3:7443 hcp-ingress proxy, ECDSA P-256 leaf
#   passthrough (SNI = apiHost, client certificate end to end):
#     127.0.0.2:7445 HAProxy mode tcp (k0smotron's config would terminate
#                    the client's TLS and lose its certificate)
#     127.0.0.3:7445 hcp-ingress proxy (the SNI is a passthrough name)
#   PROXY v2 (no SNI, mode proxy-protocol):
#     127.0.0.2:7446 HAProxy mode tcp, send-proxy-v2
#     127.0.0.3:7446 hcp-ingress proxy, mode proxy-protocol
#   every proxy ──> 127.0.0.1:8443 shared ingress (HAProxy, SNI routing)
#                   127.0.0.1:8444 same ingress, accept-proxy (PROXY v2)
#                     ──> 127.0.0.1:9001 / :9002 tenant stand-ins (nginx, TLS)
#   "direct" = 127.0.0.1:9001, no proxy: the physical limit.
#
# Prints, per path, ours next to HAProxy with the ratio: CPU per new TLS
# connection and per keep-alive request (utime+stime of each proxy process
# from /proc/PID/stat per unit of work: client, ingress and tenants share
# the cores, so rates are capped by the rig, CPU per unit is not), added
# p50/p99 latency at c=1, bytes per idle connection (1,000 held, fresh
# processes), idle RSS; and the rates; then ../shared/PERF.md's targets,
# met or not, and for the reencrypt path the floor: our passthrough path's
# CPU (no TLS of ours) and what each CPU target leaves for TLS on this
# machine (hack/bench/report.py). Needs loopback only; packages:
# haproxy nginx wrk openssl python3 curl (see .ci/run).
#
# Env: DURATION (s per run, default 2), REPS (default 3), CONNS (default 50),
#      ECDSA_ANCHOR=1 (also HAProxy with our ECDSA leaf on the reencrypt path),
#      IDLE (idle connections, default 1000), IDLE_SETTLE (seconds they are
#      held idle before RSS is read, default 5: a proxy may release what a
#      quiet connection no longer needs), PROXY_THREADS (default 1),
#      HCP_INGRESS (binary; default: hcp-ingress-proxy from cargo build
#      --profile $PROFILE [--target $TARGET]; the multi-subcommand
#      hcp-ingress works too), TARGET (e.g. x86_64-unknown-linux-musl, what
#      the image ships),
#      PROFILE (default release; `load` builds in minutes, not tens),
#      HCP_INGRESS_B (a second binary, run on the reencrypt path next to the
#      first in the same run, 127.0.0.4:7443: A/B of a change),
#      PROXY_EXTRA (YAML lines appended to every proxy config, for experiments),
#      PATHS (default "reencrypt passthrough proxyv2"),
#      NET (default 127.0.0: the rig's addresses are $NET.1 to $NET.4),
#      UPSTREAM_TLS13=1 (tenants speak TLS 1.3 as a Go API server does;
#      Debian's nginx 1.22 defaults to TLS 1.2, whose resumption needs no
#      key exchange),
#      ONLY=lat (latency runs only: skips memory, keep-alive and new-conn),
#      ONLY=mem (memory only: skips the load runs),
#      PROXY_WRAP (a command the reencrypt proxy runs under, e.g. valgrind;
#      with PROXY_WRAP_ALL=1 every one of ours),
#      PERF_RECORD=FILE, STRACE_COUNT=FILE (perf record -g, strace -c the
#      reencrypt proxy during the keep-alive and new-connection runs of the
#      first repetition: FILE.ka, FILE.nc; CPU figures of those runs
#      include the probe's overhead),
#      PERF_STAT=FILE (perf stat of EVERY process under test, ours and
#      HAProxy alike, during those runs: syscalls, sends, packets out,
#      wakeups of other processes, context switches, and the run's request
#      count, in FILE.<target>.ka and .nc; divide by the requests).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-2}
REPS=${REPS:-3}
CONNS=${CONNS:-50}
IDLE=${IDLE:-1000}
PROXY_THREADS=${PROXY_THREADS:-1}
PROFILE=${PROFILE:-release}
PATHS=${PATHS:-reencrypt passthrough proxyv2}
# Every address of the rig is $NET.1-4 (all of 127/8 is local): another rig
# running at the same time on the machine needs another NET.
NET=${NET:-127.0.0}

. hack/bench/rig.sh
require haproxy nginx wrk openssl python3 curl
proxy_binary "$PROFILE"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# Every process under test starts from a cold page cache, as on a node.
evict "$HCP_INGRESS" ${HCP_INGRESS_B:+"$HCP_INGRESS_B"} "$(command -v haproxy)"
workdir bench-proxy

# --- PKI: rig_pki's certificates (our ECDSA leaf also names $NET.4, where
# the A/B binary listens), tenant B's API certificate and a client
# certificate for the passthrough path.
rig_pki "bench cluster CA" "IP:$NET.2,IP:$NET.3,IP:10.96.0.1" "IP:$NET.2,IP:$NET.3,IP:$NET.4,IP:10.96.0.1"
pki leaf tenant-b rsa:2048 "" "DNS:api.tenant-b.example.com"
pki leaf client ec "-pkeyopt ec_paramgen_curve:P-256" "DNS:bench-client" clientAuth

# --- tenant stand-ins: one nginx process, ~260-byte JSON body, tickets on;
# tenant A echoes the client certificate's subject.
{
  nginx_head backends
  if [ "${UPSTREAM_TLS13:-}" = 1 ]; then echo "  ssl_protocols TLSv1.2 TLSv1.3;"; fi
  nginx_server "$NET.1:9001 ssl" tenant-a "$TENANT_BODY" \
    "ssl_client_certificate $W/ca.crt; ssl_verify_client optional;" \
    "add_header X-Client-DN \$ssl_client_s_dn always;"
  nginx_server "$NET.1:9002 ssl" tenant-b '{"tenant":"b"}'
  echo "}"
} > "$W/backends.conf"
nginx -p "$W" -c "$W/backends.conf" & PIDS+=($!)
NGINX_PID=$!

# --- shared ingress: HAProxy routing by SNI, L4; and by the PROXY v2
# authority TLV (HAProxy's own send-proxy-v2 sends none: default backend).
{ ingress_cfg 8000 5m "$NET.1:8443" "$NET.1:9001"; cat <<EOF; } > "$W/ingress.cfg"
  use_backend tenant_b if { req.ssl_sni -i api.tenant-b.example.com }
frontend ingress_pp
  bind $NET.1:8444 accept-proxy
  use_backend tenant_b if { fc_pp_authority -i api.tenant-b.example.com }
  default_backend tenant_a
backend tenant_b
  server b $NET.1:9002
EOF
haproxy -db -f "$W/ingress.cfg" & PIDS+=($!)

# --- the anchors, one HAProxy process each (nbthread 1). k0smotron's
# sidecar config, verbatim frontend/backend, and the L4 configs doing the
# same work as our passthrough and PROXY v2 paths.
hap() { # name port frontend-bind-extra backend-server-line
  sidecar_cfg 8000 5m "$NET.2:$2" "$3" "$4" > "$W/hap-$1.cfg"
  haproxy -db -f "$W/hap-$1.cfg" & PIDS+=($!)
  eval "HAP_$1=$!"
}
hap k0s 7443 "ssl crt $W/k0s-rsa.pem" "$(k0s_upstream "$NET.1:8443")"
hap ecdsa 7444 "ssl crt $W/ecdsa.pem" "$(k0s_upstream "$NET.1:8443")"
hap l4 7445 "" "server kube_api $NET.1:8443"
hap pp 7446 "" "server kube_api $NET.1:8444 send-proxy-v2"

# --- the proxy under test: one process per path, so that each path's
# memory is measured on a fresh process (freed memory of one measurement
# would otherwise be reused and hide the next one's growth).
ours() { # name port mode upstream-port admin-port [address binary]
  cat > "$W/ours-$1.yaml" <<EOF
listen: {address: ${6:-$NET.3}, port: $2}
mode: $3
upstream:
  serverName: $API
  port: $4
  addresses: ["$NET.1"]
  caFile: $W/ca.crt
tls: {certFile: $W/ecdsa.crt, keyFile: $W/ecdsa.key}
admin: {address: "${6:-$NET.3}:$5"}
limits: {maxConnections: 9000}
log: {level: warn}
workerThreads: $PROXY_THREADS
${PROXY_EXTRA:-}
EOF
  local wrap=()
  if [ -n "${PROXY_WRAP:-}" ] && { [ "$1" = re ] || [ "${PROXY_WRAP_ALL:-}" = 1 ]; }; then
    read -ra wrap <<< "$PROXY_WRAP"
  fi
  proxy_argv "${7:-$HCP_INGRESS}"
  "${wrap[@]}" "${PROXY_ARGV[@]}" --config "$W/ours-$1.yaml" & PIDS+=($!)
  eval "OURS_$1=$!"
}
ours re 7443 reencrypt 8443 9445
ours sni 7445 reencrypt 8443 9446
ours pp 7446 proxy-protocol 8444 9447
OURS_re_b=""
if [ -n "${HCP_INGRESS_B:-}" ]; then
  ours re_b 7443 reencrypt 8443 9448 $NET.4 "$HCP_INGRESS_B"
fi

wait_ok https://$NET.1:9001/
for p in 9445 9446 9447; do wait_ok "http://$NET.3:$p/readyz"; done
[ -z "$OURS_re_b" ] || wait_ok http://$NET.4:9448/readyz
for a in $NET.2:7443 $NET.2:7444 $NET.3:7443 $NET.2:7446 $NET.3:7446; do wait_ok "https://$a/"; done
for ip in $NET.2 $NET.3; do wait_ok "https://$API:7445/" --resolve "$API:7445:$ip"; done
# The passthrough path carries the client certificate to the tenant.
DN=$(curl -ks -D - -o /dev/null --cert "$W/client.crt" --key "$W/client.key" \
  --resolve "$API:7445:$NET.3" "https://$API:7445/" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-client-dn" {print $2}')
[ "$DN" = "CN=client" ] || { echo "error: the client certificate did not pass through (X-Client-DN: '$DN')" >&2; exit 1; }

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }  # KiB
# VmRSS counts mapped, clean page-cache pages of the binary and its
# libraries; RssAnon is the private memory each extra process really costs.
anon() { awk '/RssAnon/ {print $2}' "/proc/$1/status"; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# Results: one "key value" line each, read by the report below.
R="$W/results"
: > "$R"
put() { echo "$1 $2" >> "$R"; }

# Targets: the PID whose CPU is counted, the URL, and for SNI targets the
# address wrk connects to (the URL's host stays the SNI).
declare -A PID_OF URL SNI_AT
PID_OF=([direct]=$NGINX_PID [hap_k0s]=$HAP_k0s [hap_ecdsa]=$HAP_ecdsa [ours_re]=$OURS_re
        [hap_l4]=$HAP_l4 [ours_sni]=$OURS_sni [hap_pp]=$HAP_pp [ours_pp]=$OURS_pp [ours_re_b]=$OURS_re_b)
URL=([direct]=https://$NET.1:9001/ [hap_k0s]=https://$NET.2:7443/ [hap_ecdsa]=https://$NET.2:7444/
     [ours_re]=https://$NET.3:7443/ [hap_l4]=https://$API:7445/ [ours_sni]=https://$API:7445/
     [hap_pp]=https://$NET.2:7446/ [ours_pp]=https://$NET.3:7446/ [ours_re_b]=https://$NET.4:7443/)
SNI_AT=([hap_l4]=$NET.2 [ours_sni]=$NET.3)
TARGETS=(direct)
for p in $PATHS; do
  case $p in
    reencrypt) TARGETS+=(hap_k0s ours_re)
      [ "${ECDSA_ANCHOR:-}" != 1 ] || TARGETS+=(hap_ecdsa)
      [ -z "$OURS_re_b" ] || TARGETS+=(ours_re_b) ;;
    passthrough) TARGETS+=(hap_l4 ours_sni) ;;
    proxyv2) TARGETS+=(hap_pp ours_pp) ;;
    *) echo "error: unknown path $p (reencrypt passthrough proxyv2)" >&2; exit 1 ;;
  esac
done
has() { [[ " ${TARGETS[*]} " == *" $1 "* ]]; }

for t in "${TARGETS[@]}"; do
  [ "$t" = direct ] && continue
  put "idle_rss.$t" "$(rss "${PID_OF[$t]}")"
  put "idle_anon.$t" "$(anon "${PID_OF[$t]}")"
done

# --- memory first, on fresh processes: IDLE idle TLS connections (one
# request each), held while RSS is read.
idle_delta() { # pid host port [idle_conns.py args]
  local pid=$1 before after fifo="$W/fifo.$RANDOM"; shift
  mkfifo "$fifo"
  before=$(rss "$pid")
  python3 hack/bench/idle_conns.py "$1" "$2" "$IDLE" --ca "$W/ca.crt" "${@:3}" < "$fifo" > "$W/idle.out" & local py=$!
  exec 9>"$fifo"
  for _ in $(seq 1 600); do grep -q ready "$W/idle.out" 2>/dev/null && break; sleep 0.1; done
  sleep "${IDLE_SETTLE:-5}"
  after=$(rss "$pid")
  local opened; opened=$(awk '/ready/ {print $2}' "$W/idle.out")
  exec 9>&-
  wait "$py" || true
  rm -f "$fifo"
  sleep 1
  python3 -c "print(round(($after-$before)*1024/max(1,${opened:-0})))"
}
if [ "${ONLY:-}" != lat ]; then
  CLIENT_CERT=(--cert "$W/client.crt" --key "$W/client.key")
  if has ours_re; then
    put idle_conn.ours_re "$(idle_delta "$OURS_re" $NET.3 7443)"
    has ours_re_b && put idle_conn.ours_re_b "$(idle_delta "$OURS_re_b" $NET.4 7443)"
    put idle_conn.hap_k0s "$(idle_delta "$HAP_k0s" $NET.2 7443)"
  fi
  if has ours_sni; then
    put idle_conn.ours_sni "$(idle_delta "$OURS_sni" $NET.3 7445 --sni "$API" "${CLIENT_CERT[@]}")"
    put idle_conn.hap_l4 "$(idle_delta "$HAP_l4" $NET.2 7445 --sni "$API" "${CLIENT_CERT[@]}")"
  fi
  if has ours_pp; then
    put idle_conn.ours_pp "$(idle_delta "$OURS_pp" $NET.3 7446 --no-check-hostname)"
    put idle_conn.hap_pp "$(idle_delta "$HAP_pp" $NET.2 7446 --no-check-hostname)"
  fi
fi

# --- throughput, CPU and latency, interleaved A B A B.
# Prints "rate cpu_us_per_unit" (ka, nc) or "p50_us p99_us" (lat).
runwrk() { # target mode
  local t=$1 url=${URL[$1]} pid=${PID_OF[$1]} out t0 t1 args=() perf=""
  [ -n "${SNI_AT[$t]:-}" ] && args=(-s hack/bench/sni.lua)
  if [ -n "${PERF_STAT:-}" ] && [ "$REP" = 1 ] && [ "$2" != lat ]; then
    perf stat -e task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,net:net_dev_xmit,sched:sched_wakeup \
      -p "$pid" -o "$PERF_STAT.$t.$2" -- sleep "$DURATION" >/dev/null 2>&1 & perf=$!
  elif [ "$t" = ours_re ] && [ "$REP" = 1 ] && [ "$2" != lat ]; then
    if [ -n "${PERF_RECORD:-}" ]; then
      perf record -q -g -p "$pid" -o "$PERF_RECORD.$2" -- sleep "$DURATION" >/dev/null 2>&1 & perf=$!
    elif [ -n "${STRACE_COUNT:-}" ]; then
      timeout -s INT "$DURATION" strace -c -f -p "$pid" -o "$STRACE_COUNT.$2" >/dev/null 2>&1 & perf=$!
    fi
  fi
  t0=$(ticks "$pid")
  case $2 in
    ka) out=$(WRK_CONNECT=${SNI_AT[$t]:-} wrk "${args[@]}" -t1 -c"$CONNS" -d"${DURATION}s" "$url") ;;
    nc) out=$(WRK_CONNECT=${SNI_AT[$t]:-} wrk "${args[@]}" -t1 -c"$CONNS" -d"${DURATION}s" -H "Connection: close" "$url") ;;
    lat) out=$(WRK_CONNECT=${SNI_AT[$t]:-} wrk "${args[@]}" -t1 -c1 -d"${DURATION}s" --latency "$url")
         echo "$out" | awk 'function us(v){ if (v ~ /us$/) {sub(/us$/,"",v); return v} if (v ~ /ms$/) {sub(/ms$/,"",v); return v*1000} if (v ~ /s$/) {sub(/s$/,"",v); return v*1000000} return v }
                            $1=="50%" {p50=us($2)} $1=="99%" {p99=us($2)} END {print p50, p99}'
         return ;;
  esac
  t1=$(ticks "$pid")
  if [ -n "$perf" ]; then wait "$perf" || true; fi
  if [ -n "${PERF_STAT:-}" ] && [ -f "$PERF_STAT.$t.$2" ]; then
    echo "$out" | awk '/requests in/ {print "requests:", $1}' >> "$PERF_STAT.$t.$2"
  fi
  if echo "$out" | grep -q "Non-2xx\|Socket errors: connect [1-9]"; then
    echo "warning: $t $2: $(echo "$out" | grep 'Non-2xx\|Socket errors' | tr '\n' ' ')" >&2
  fi
  echo "$out" | awk -v d=$((t1 - t0)) '/requests in/ {n=$1} /Requests\/sec/ {r=$2} END {printf "%s %.1f\n", r, d*10000/(n>0?n:1)}'
}
[ "${ONLY:-}" = mem ] && REPS=0
for REP in $(seq 1 "$REPS"); do
  for t in "${TARGETS[@]}"; do
    if [ "${ONLY:-}" != lat ]; then
      read -r a b < <(runwrk "$t" ka); put "ka.$t" "$a"; put "kacpu.$t" "$b"
      read -r a b < <(runwrk "$t" nc); put "nc.$t" "$a"; put "nccpu.$t" "$b"
    fi
    read -r a b < <(runwrk "$t" lat); put "p50.$t" "$a"; put "p99.$t" "$b"
  done
  echo "repetition $REP/$REPS done" >&2
done
for t in "${TARGETS[@]}"; do
  [ "$t" = direct ] && continue
  put "rss_after.$t" "$(rss "${PID_OF[$t]}")"
done
# Does the reencrypt path's upstream TLS resume? Its counter says.
if has ours_re; then
  curl -s http://$NET.3:9445/metrics | awk '/^hcp_proxy_upstream_tls_handshakes_total/ {
    k=$1; sub(/.*kind="/, "", k); sub(/".*/, "", k); print "handshakes_" k ".ours_re", $2}
    /^hcp_proxy_tls_key_exchanges_total/ && $2 > 0 {
    k=$1; sub(/.*leg="/, "", k); sub(/".*/, "", k); g=$1; sub(/.*group="/, "", g); sub(/".*/, "", g)
    print "kx_" k "_" g ".ours_re", $2}' >> "$R"
fi

python3 hack/bench/report.py "$R" "$REPS" "$DURATION" "$CONNS" "$IDLE"
