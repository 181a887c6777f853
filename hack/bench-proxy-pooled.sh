#!/usr/bin/env bash
# Benchmark the proxy's pooled mode against reencrypt mode and the anchor,
# HAProxy with k0smotron's sidecar config, in ONE run on the same rig
# (../shared/PERF.md), all on loopback:
#
#   client ──> 127.0.15.2:7443 HAProxy, k0smotron config, RSA-2048 leaf (anchor)
#          ──> 127.0.15.3:7443 hcp-ingress proxy, mode reencrypt
#          ──> 127.0.15.4:7443 hcp-ingress proxy, mode pooled
#          ──> 127.0.15.1:9001 tenant A directly ("direct", latency baseline)
#   every proxy ──> 127.0.15.1:8443 shared ingress (HAProxy, SNI routing)
#                     ──> 127.0.15.1:9001 tenant stand-in (nginx, TLS, h2 + http/1.1)
#
# Prints, per target: upstream connections held while POD_CONNS pod
# connections are open (one request each) and the proxy's RSS growth per
# such connection (first use on a fresh process), CPU of the node proxy per
# keep-alive request and per new pod connection, CPU of the shared side
# (ingress + tenant) per request, and added p50/p99 latency at c=1.
# Its own loopback addresses (127.0.15.0/24), so that it runs next to
# hack/bench-proxy.sh.
# Packages: haproxy nginx wrk openssl python3 curl iproute2 (ss).
#
# Env: DURATION (s, default 5), REPS (default 3), CONNS (default 50),
#      POD_CONNS (default 200), HCP_INGRESS (binary; default: hcp-ingress-proxy
#      from cargo build --release), PROXY_WRAP (a command the pooled proxy
#      runs under, e.g. valgrind; its CPU figures are then the wrapper's).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-50}
POD_CONNS=${POD_CONNS:-200}

. hack/bench/rig.sh
require haproxy nginx wrk openssl python3 curl ss
proxy_binary release
# Every process under test starts from a cold page cache, as on a node.
evict "$HCP_INGRESS" "$(command -v haproxy)"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
workdir bench-pooled

rig_pki "bench cluster CA" "IP:127.0.15.2,IP:127.0.15.3,IP:127.0.15.4"

# The tenant speaks HTTP/2 (as a kube-apiserver does) and HTTP/1.1.
{ nginx_head tenant; nginx_server "127.0.15.1:9001 ssl http2" tenant-a "$TENANT_BODY"; echo "}"; } > "$W/tenant.conf"
nginx -p "$W" -c "$W/tenant.conf" & TENANT_PID=$!; PIDS+=($TENANT_PID)

# The shared ingress (SNI routing) and the anchor, HAProxy with k0smotron's
# sidecar config and its RSA-2048 leaf.
ingress_cfg 8000 5m 127.0.15.1:8443 127.0.15.1:9001 > "$W/ingress.cfg"
haproxy -db -f "$W/ingress.cfg" & INGRESS_PID=$!; PIDS+=($INGRESS_PID)
sidecar_cfg "" 5m 127.0.15.2:7443 "ssl crt $W/k0s-rsa.pem" "$(k0s_upstream 127.0.15.1:8443)" > "$W/anchor.cfg"
haproxy -db -f "$W/anchor.cfg" & ANCHOR_PID=$!; PIDS+=($ANCHOR_PID)

proxy() { # address mode
  cat > "$W/proxy-$2.yaml" <<EOF
listen: {address: $1, port: 7443}
mode: $2
upstream: {serverName: $API, port: 8443, addresses: ["127.0.15.1"], caFile: $W/ca.crt}
tls: {certFile: $W/ecdsa.crt, keyFile: $W/ecdsa.key}
admin: {address: "$1:9445"}
limits: {maxConnections: 20000}
log: {level: warn}
EOF
  local wrap=()
  [ "$2" = pooled ] && [ -n "${PROXY_WRAP:-}" ] && read -ra wrap <<< "$PROXY_WRAP"
  proxy_argv "$HCP_INGRESS"
  "${wrap[@]}" "${PROXY_ARGV[@]}" --config "$W/proxy-$2.yaml" & PIDS+=($!)
}
proxy 127.0.15.3 reencrypt; REENCRYPT_PID=${PIDS[-1]}
proxy 127.0.15.4 pooled; POOLED_PID=${PIDS[-1]}

for u in https://127.0.15.1:9001/ http://127.0.15.3:9445/readyz http://127.0.15.4:9445/readyz \
         https://127.0.15.2:7443/ https://127.0.15.3:7443/ https://127.0.15.4:7443/; do wait_ok "$u"; done

TARGETS=(haproxy reencrypt pooled direct)
declare -A HOST=([haproxy]=127.0.15.2:7443 [reencrypt]=127.0.15.3:7443 [pooled]=127.0.15.4:7443 [direct]=127.0.15.1:9001)
declare -A PID_OF=([haproxy]=$ANCHOR_PID [reencrypt]=$REENCRYPT_PID [pooled]=$POOLED_PID [direct]=$TENANT_PID)

# --- upstream connections held by each node proxy while POD_CONNS pod
# connections are open, counted by the kernel (sockets of that process to the
# ingress) and, for pooled mode, by the proxy's own gauge.
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }  # KiB
held_upstream() { # target -> "opened upstream_sockets bytes_per_pod_conn"
  local hp=${HOST[$1]} pid=${PID_OF[$1]} fifo="$W/fifo.$RANDOM" n before after
  mkfifo "$fifo"
  before=$(rss "$pid")
  python3 hack/bench/idle_conns.py "${hp%:*}" "${hp#*:}" "$POD_CONNS" --ca "$W/ca.crt" < "$fifo" > "$W/idle.out" & local py=$!
  exec 9>"$fifo"
  for _ in $(seq 1 600); do grep -q ready "$W/idle.out" 2>/dev/null && break; sleep 0.1; done
  n=$(ss -Htnp state established '( dport = :8443 )' | grep -c "pid=$pid," || true)
  after=$(rss "$pid")
  local opened; opened=$(awk '/ready/ {print $2}' "$W/idle.out")
  echo "$opened $n $(( (after - before) * 1024 / (opened > 0 ? opened : 1) ))"
  exec 9>&-
  wait "$py" || true
  rm -f "$fifo"
}
declare -A HELD OPENED MEM
for t in haproxy reencrypt pooled; do read -r OPENED[$t] HELD[$t] MEM[$t] < <(held_upstream "$t"); done
POOL_GAUGE=$(curl -s http://127.0.15.4:9445/metrics | awk '/^hcp_proxy_pool_upstream_connections / {print $2}')

# --- CPU per request (the proxy process, and the shared side: ingress +
# tenant) and latency, interleaved, medians of REPS.
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
shared_ticks() { echo $(( $(ticks "$INGRESS_PID") + $(ticks "$TENANT_PID") )); }
runwrk() { # target mode -> "rate proxy_us_per_req shared_us_per_req" or "p50 p99"
  local url="https://${HOST[$1]}/" pid=${PID_OF[$1]} out t0 t1 s0 s1
  t0=$(ticks "$pid"); s0=$(shared_ticks)
  case $2 in
    ka) out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" "$url") ;;
    nc) out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" -H "Connection: close" "$url") ;;
    lat) out=$(wrk -t1 -c1 -d"${DURATION}s" --latency "$url")
         echo "$out" | awk 'function us(v){ if (v ~ /us$/) {sub(/us$/,"",v); return v} if (v ~ /ms$/) {sub(/ms$/,"",v); return v*1000} if (v ~ /s$/) {sub(/s$/,"",v); return v*1000000} return v }
                            $1=="50%" {p50=us($2)} $1=="99%" {p99=us($2)} END {print p50, p99}'
         return ;;
  esac
  t1=$(ticks "$pid"); s1=$(shared_ticks)
  echo "$out" | awk -v d=$((t1 - t0)) -v s=$((s1 - s0)) '/requests in/ {n=$1} /Requests\/sec/ {r=$2} END {n=(n>0?n:1); printf "%s %.1f %.1f\n", r, d*10000/n, s*10000/n}'
}
declare -A KA KACPU KASH NC NCCPU NCSH P50 P99
for t in "${TARGETS[@]}"; do KA[$t]=""; KACPU[$t]=""; KASH[$t]=""; NC[$t]=""; NCCPU[$t]=""; NCSH[$t]=""; P50[$t]=""; P99[$t]=""; done
for rep in $(seq 1 "$REPS"); do
  for t in "${TARGETS[@]}"; do
    if [ "$t" != direct ]; then
      read -r a b c < <(runwrk "$t" ka); KA[$t]+="$a "; KACPU[$t]+="$b "; KASH[$t]+="$c "
      read -r a b c < <(runwrk "$t" nc); NC[$t]+="$a "; NCCPU[$t]+="$b "; NCSH[$t]+="$c "
    fi
    read -r a b < <(runwrk "$t" lat); P50[$t]+="$a "; P99[$t]+="$b "
  done
  echo "repetition $rep/$REPS done" >&2
done

python3 - <<PY
import statistics as st
def med(s):
    v=[float(x) for x in s.split()]
    return st.median(v) if v else float('nan')
T=["haproxy","reencrypt","pooled"]
def d(**kw): return {t: med(kw[t]) for t in kw}
ka=d(haproxy="${KA[haproxy]}", reencrypt="${KA[reencrypt]}", pooled="${KA[pooled]}")
kacpu=d(haproxy="${KACPU[haproxy]}", reencrypt="${KACPU[reencrypt]}", pooled="${KACPU[pooled]}")
kash=d(haproxy="${KASH[haproxy]}", reencrypt="${KASH[reencrypt]}", pooled="${KASH[pooled]}")
nc=d(haproxy="${NC[haproxy]}", reencrypt="${NC[reencrypt]}", pooled="${NC[pooled]}")
nccpu=d(haproxy="${NCCPU[haproxy]}", reencrypt="${NCCPU[reencrypt]}", pooled="${NCCPU[pooled]}")
ncsh=d(haproxy="${NCSH[haproxy]}", reencrypt="${NCSH[reencrypt]}", pooled="${NCSH[pooled]}")
p50=d(haproxy="${P50[haproxy]}", reencrypt="${P50[reencrypt]}", pooled="${P50[pooled]}", direct="${P50[direct]}")
p99=d(haproxy="${P99[haproxy]}", reencrypt="${P99[reencrypt]}", pooled="${P99[pooled]}", direct="${P99[direct]}")
add50={t: p50[t]-p50["direct"] for t in T}
add99={t: p99[t]-p99["direct"] for t in T}
held={"haproxy": ${HELD[haproxy]}, "reencrypt": ${HELD[reencrypt]}, "pooled": ${HELD[pooled]}}
def r(a,b): return a/b if b else float('nan')
print(f"# pooled mode vs reencrypt vs HAProxy (k0smotron config), same run; medians of ${REPS} x ${DURATION}s, c=${CONNS}")
print(f"{'metric':<48}{'haproxy':>10}{'reencrypt':>10}{'pooled':>10}{'pool/hap':>10}{'pool/reenc':>11}")
def row(name, v, fmt="{:.1f}"):
    cells="".join(f"{fmt.format(v[t]):>10}" for t in T)
    print(f"{name:<48}{cells}{r(v['pooled'],v['haproxy']):>10.2f}{r(v['pooled'],v['reencrypt']):>11.2f}")
row(f"upstream conns held, ${POD_CONNS} pod conns open", held, "{:.0f}")
row("proxy RSS bytes per idle pod connection", {"haproxy": ${MEM[haproxy]}, "reencrypt": ${MEM[reencrypt]}, "pooled": ${MEM[pooled]}}, "{:.0f}")
row("keep-alive req/s", ka, "{:.0f}")
row("proxy CPU us per keep-alive request", kacpu)
row("shared side CPU us per keep-alive request", kash)
row("new pod connections/s", nc, "{:.0f}")
row("proxy CPU us per new pod connection", nccpu)
row("shared side CPU us per new pod connection", ncsh)
row("added p50 latency c=1 (us)", add50, "{:.0f}")
row("added p99 latency c=1 (us)", add99, "{:.0f}")
print(f"pod connections opened: haproxy ${OPENED[haproxy]}, reencrypt ${OPENED[reencrypt]}, pooled ${OPENED[pooled]}; pooled mode's own gauge hcp_proxy_pool_upstream_connections = ${POOL_GAUGE:-?} (target <= 4)")
print("shared side = the ingress HAProxy + the tenant nginx: what every pod connection costs the shared ingress and the API server")
PY
