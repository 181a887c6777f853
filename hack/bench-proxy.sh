#!/usr/bin/env bash
# Benchmark `hcp-ingress proxy` against its anchor, HAProxy running
# k0smotron's sidecar config, in ONE run on the same machine, against the same
# tenant stand-ins and shared ingress (rig of ../shared/PERF.md), all on
# loopback:
#
#   wrk ──> 127.0.0.2:7443 HAProxy, k0smotron config, RSA-2048 leaf (anchor)
#       ──> 127.0.0.2:7444 HAProxy, same config, ECDSA P-256 leaf
#       ──> 127.0.0.3:7443 hcp-ingress proxy, ECDSA P-256 leaf
#       ──> 127.0.0.1:9001 tenant A directly ("direct", the physical limit)
#   every proxy ──> 127.0.0.1:8443 shared ingress (HAProxy, SNI routing)
#                     ──> 127.0.0.1:9001 / :9002 tenant stand-ins (nginx, TLS)
#
# Prints keep-alive req/s, new connections/s, added p50/p99 latency at c=1,
# idle RSS and RSS per idle TLS / passthrough connection, each with its ratio
# to the anchor. Needs root-free loopback only; packages: haproxy nginx wrk
# openssl python3 (see .ci/run).
#
# Env: DURATION (s, default 5), REPS (default 3), CONNS (default 50),
#      IDLE (idle connections, default 1000), PROXY_THREADS (default 1),
#      HCP_INGRESS (binary; default: cargo build --release),
#      PROXY_EXTRA (YAML lines appended to the proxy config, for experiments),
#      ONLY=lat (latency runs only: skips memory, keep-alive and new-conn).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-50}
IDLE=${IDLE:-1000}
PROXY_THREADS=${PROXY_THREADS:-1}
API=api.tenant-a.example.com

for bin in haproxy nginx wrk openssl python3 curl; do
  command -v "$bin" >/dev/null || { echo "error: $bin is required (apt-get install -y haproxy nginx wrk openssl python3 curl)" >&2; exit 1; }
done
if [ -z "${HCP_INGRESS:-}" ]; then
  cargo build --release --bin hcp-ingress >&2
  HCP_INGRESS="${CARGO_TARGET_DIR:-target}/release/hcp-ingress"
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

W=$(mktemp -d /tmp/bench-proxy.XXXXXX)
chmod 755 "$W"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

# --- PKI: cluster CA, tenant API certs (RSA-2048 like a kube-apiserver),
# k0smotron's RSA-2048 proxy leaf, our ECDSA P-256 leaf.
(
  . hack/bench/pki.sh
  cd "$W"
  ca "bench cluster CA"
  leaf tenant-a rsa:2048 "" "DNS:$API"
  leaf tenant-b rsa:2048 "" "DNS:api.tenant-b.example.com"
  leaf k0s-rsa rsa:2048 "" "DNS:kubernetes.default.svc,IP:127.0.0.2,IP:127.0.0.3,IP:10.96.0.1"
  leaf ecdsa ec "-pkeyopt ec_paramgen_curve:P-256" "DNS:kubernetes.default.svc,IP:127.0.0.2,IP:127.0.0.3,IP:10.96.0.1"
  chmod 644 ./*
)

# --- tenant stand-ins: one nginx process, ~260-byte JSON body, tickets on.
BODY='{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","message":"tenant-a api stand-in","reason":"","details":{"name":"bench","kind":"pods"},"code":200,"padding":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
mkdir -p "$W/tmp"
cat > "$W/backends.conf" <<EOF
daemon off;
master_process off;
worker_rlimit_nofile 65536;
pid $W/backends.pid;
error_log $W/backends-error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $W/tmp; proxy_temp_path $W/tmp; fastcgi_temp_path $W/tmp; uwsgi_temp_path $W/tmp; scgi_temp_path $W/tmp;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  ssl_session_tickets on;
  ssl_session_cache shared:SSL:10m;
  default_type application/json;
  server {
    listen 127.0.0.1:9001 ssl;
    ssl_certificate $W/tenant-a.crt; ssl_certificate_key $W/tenant-a.key;
    ssl_client_certificate $W/ca.crt; ssl_verify_client optional;
    location / { return 200 '$BODY'; }
  }
  server {
    listen 127.0.0.1:9002 ssl;
    ssl_certificate $W/tenant-b.crt; ssl_certificate_key $W/tenant-b.key;
    location / { return 200 '{"tenant":"b"}'; }
  }
}
EOF
nginx -p "$W" -c "$W/backends.conf" & PIDS+=($!)

# --- shared ingress: HAProxy routing by SNI, L4.
cat > "$W/ingress.cfg" <<EOF
global
  nbthread 1
  maxconn 8000
defaults
  mode tcp
  timeout connect 5s
  timeout client 5m
  timeout server 5m
frontend ingress
  bind 127.0.0.1:8443
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend tenant_a if { req.ssl_sni -i $API }
  use_backend tenant_b if { req.ssl_sni -i api.tenant-b.example.com }
backend tenant_a
  server a 127.0.0.1:9001
backend tenant_b
  server b 127.0.0.1:9002
EOF
haproxy -db -f "$W/ingress.cfg" & PIDS+=($!)

# --- the anchor: k0smotron's sidecar config, verbatim frontend/backend.
anchor() { # port leaf
  cat > "$W/anchor-$1.cfg" <<EOF
global
  nbthread 1
defaults
  timeout connect 5s
  timeout client 5m
  timeout server 5m
frontend kubeapi_front
    bind 127.0.0.2:$1 v4v6 ssl crt $W/$2.pem
    mode tcp
    default_backend kubeapi_back
backend kubeapi_back
    mode tcp
    server kube_api 127.0.0.1:8443 ssl verify required ca-file $W/ca.crt sni str($API)
EOF
  haproxy -db -f "$W/anchor-$1.cfg" & PIDS+=($!)
  eval "ANCHOR_$1=$!"
}
anchor 7443 k0s-rsa
anchor 7444 ecdsa

# --- the proxy under test.
cat > "$W/proxy.yaml" <<EOF
listen: {address: 127.0.0.3, port: 7443}
mode: reencrypt
upstream:
  serverName: $API
  port: 8443
  addresses: ["127.0.0.1"]
  caFile: $W/ca.crt
tls: {certFile: $W/ecdsa.crt, keyFile: $W/ecdsa.key}
admin: {address: "127.0.0.3:9445"}
limits: {maxConnections: 20000}
log: {level: warn}
workerThreads: $PROXY_THREADS
${PROXY_EXTRA:-}
EOF
"$HCP_INGRESS" proxy --config "$W/proxy.yaml" & PROXY_PID=$!; PIDS+=($PROXY_PID)
# A second, fresh instance only for passthrough memory: freed memory of the
# reencrypt measurement would otherwise be reused and hide the growth.
sed -e 's/port: 7443}/port: 7445}/' -e 's/9445/9446/' "$W/proxy.yaml" > "$W/proxy-l4.yaml"
"$HCP_INGRESS" proxy --config "$W/proxy-l4.yaml" & PROXY_L4_PID=$!; PIDS+=($PROXY_L4_PID)

wait_ok() { # url
  for _ in $(seq 1 100); do curl -ksf -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "error: $1 never answered" >&2; exit 1
}
wait_ok https://127.0.0.1:9001/
wait_ok http://127.0.0.3:9445/readyz
wait_ok https://127.0.0.2:7443/
wait_ok https://127.0.0.2:7444/
wait_ok https://127.0.0.3:7443/
wait_ok http://127.0.0.3:9446/readyz

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }  # KiB

declare -A URL=(
  [direct]=https://127.0.0.1:9001/
  [haproxy]=https://127.0.0.2:7443/
  [haproxy_ecdsa]=https://127.0.0.2:7444/
  [proxy]=https://127.0.0.3:7443/
)
TARGETS=(direct haproxy haproxy_ecdsa proxy)

# --- memory first, on fresh processes: idle RSS, then IDLE idle TLS
# connections (one request each), held while RSS is read.
IDLE_PROXY=$(rss "$PROXY_PID")
IDLE_HAPROXY=$(rss "$ANCHOR_7443")
# VmRSS counts mapped, clean page-cache pages of the binary and its
# libraries; RssAnon is the private memory each extra process really costs.
anon() { awk '/RssAnon/ {print $2}' "/proc/$1/status"; }
ANON_PROXY=$(anon "$PROXY_PID")
ANON_HAPROXY=$(anon "$ANCHOR_7443")
idle_delta() { # pid host port [--sni name]
  local pid=$1 before after fifo="$W/fifo.$RANDOM"; shift
  mkfifo "$fifo"
  before=$(rss "$pid")
  python3 hack/bench/idle_conns.py "$1" "$2" "$IDLE" --ca "$W/ca.crt" "${@:3}" < "$fifo" > "$W/idle.out" & local py=$!
  exec 9>"$fifo"
  for _ in $(seq 1 600); do grep -q ready "$W/idle.out" 2>/dev/null && break; sleep 0.1; done
  after=$(rss "$pid")
  local opened; opened=$(awk '/ready/ {print $2}' "$W/idle.out")
  exec 9>&-
  wait "$py" || true
  rm -f "$fifo"
  sleep 1
  # bytes per connection
  python3 -c "print(round(($after-$before)*1024/max(1,$opened)))"
}
if [ "${ONLY:-}" = lat ]; then
  PER_TLS_PROXY=0; PER_TLS_HAPROXY=1; PER_L4_PROXY=0
else
  PER_TLS_PROXY=$(idle_delta "$PROXY_PID" 127.0.0.3 7443)
  PER_TLS_HAPROXY=$(idle_delta "$ANCHOR_7443" 127.0.0.2 7443)
  # SNI = apiHost: the proxy's passthrough path (client TLS end to end).
  PER_L4_PROXY=$(idle_delta "$PROXY_L4_PID" 127.0.0.3 7445 --sni "$API")
fi

# --- throughput and latency, interleaved A B A B.
declare -A KA NC P50 P99 KACPU NCCPU
for t in "${TARGETS[@]}"; do KA[$t]=""; NC[$t]=""; P50[$t]=""; P99[$t]=""; KACPU[$t]=""; NCCPU[$t]=""; done
declare -A PID_OF=([direct]=${PIDS[0]} [haproxy]=$ANCHOR_7443 [haproxy_ecdsa]=$ANCHOR_7444 [proxy]=$PROXY_PID)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# Prints "rate cpu_us_per_request" (ka, nc) or "p50_us p99_us" (lat). CPU per
# request of the process under test is far less sensitive to other load on
# the machine than the rates are.
runwrk() { # target mode
  local url=${URL[$1]} pid=${PID_OF[$1]} out t0 t1
  t0=$(ticks "$pid")
  case $2 in
    ka) out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" "$url") ;;
    nc) out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" -H "Connection: close" "$url") ;;
    lat) out=$(wrk -t1 -c1 -d"${DURATION}s" --latency "$url")
         echo "$out" | awk 'function us(v){ if (v ~ /us$/) {sub(/us$/,"",v); return v} if (v ~ /ms$/) {sub(/ms$/,"",v); return v*1000} if (v ~ /s$/) {sub(/s$/,"",v); return v*1000000} return v }
                            $1=="50%" {p50=us($2)} $1=="99%" {p99=us($2)} END {print p50, p99}'
         return ;;
  esac
  t1=$(ticks "$pid")
  echo "$out" | awk -v d=$((t1 - t0)) '/requests in/ {n=$1} /Requests\/sec/ {r=$2} END {printf "%s %.1f\n", r, d*10000/(n>0?n:1)}'
}
for rep in $(seq 1 "$REPS"); do
  for t in "${TARGETS[@]}"; do
    if [ "${ONLY:-}" != lat ]; then
      read -r a b < <(runwrk "$t" ka); KA[$t]+="$a "; KACPU[$t]+="$b "
      read -r a b < <(runwrk "$t" nc); NC[$t]+="$a "; NCCPU[$t]+="$b "
    fi
    read -r a b < <(runwrk "$t" lat)
    P50[$t]+="$a "; P99[$t]+="$b "
  done
  echo "repetition $rep/$REPS done" >&2
done
RSS_AFTER_PROXY=$(rss "$PROXY_PID")
RSS_AFTER_HAPROXY=$(rss "$ANCHOR_7443")
CPU_PROXY=$(awk '{print ($14+$15)/100}' "/proc/$PROXY_PID/stat")
CPU_HAPROXY=$(awk '{print ($14+$15)/100}' "/proc/$ANCHOR_7443/stat")

python3 - "$W" <<PY
import statistics as st
def med(s):
    v=[float(x) for x in s.split()]
    return st.median(v) if v else float('nan')
ka={t:med(s) for t,s in {"direct":"${KA[direct]}","haproxy":"${KA[haproxy]}","haproxy_ecdsa":"${KA[haproxy_ecdsa]}","proxy":"${KA[proxy]}"}.items()}
nc={t:med(s) for t,s in {"direct":"${NC[direct]}","haproxy":"${NC[haproxy]}","haproxy_ecdsa":"${NC[haproxy_ecdsa]}","proxy":"${NC[proxy]}"}.items()}
p50={t:med(s) for t,s in {"direct":"${P50[direct]}","haproxy":"${P50[haproxy]}","haproxy_ecdsa":"${P50[haproxy_ecdsa]}","proxy":"${P50[proxy]}"}.items()}
p99={t:med(s) for t,s in {"direct":"${P99[direct]}","haproxy":"${P99[haproxy]}","haproxy_ecdsa":"${P99[haproxy_ecdsa]}","proxy":"${P99[proxy]}"}.items()}
kacpu={t:med(s) for t,s in {"direct":"${KACPU[direct]}","haproxy":"${KACPU[haproxy]}","haproxy_ecdsa":"${KACPU[haproxy_ecdsa]}","proxy":"${KACPU[proxy]}"}.items()}
nccpu={t:med(s) for t,s in {"direct":"${NCCPU[direct]}","haproxy":"${NCCPU[haproxy]}","haproxy_ecdsa":"${NCCPU[haproxy_ecdsa]}","proxy":"${NCCPU[proxy]}"}.items()}
add50={t:p50[t]-p50["direct"] for t in p50}
add99={t:p99[t]-p99["direct"] for t in p99}
def r(a,b): return a/b if b==b and b else float('nan')
print(f"# hcp-ingress proxy vs HAProxy (k0smotron config), medians of ${REPS} x ${DURATION}s, c=${CONNS}")
print(f"{'metric':<42}{'direct':>10}{'haproxy':>10}{'hap-ecdsa':>10}{'proxy':>10}{'ratio':>8}  target")
def row(name, d, ratio, target, fmt="{:.0f}"):
    cells="".join(f"{(fmt.format(d[t]) if t in d else '-'):>10}" for t in ["direct","haproxy","haproxy_ecdsa","proxy"])
    print(f"{name:<42}{cells}{ratio:>8.2f}  {target}")
row("keep-alive req/s", ka, r(ka["proxy"],ka["haproxy"]), ">= 1.2x")
row("new connections/s (RSA anchor)", nc, r(nc["proxy"],nc["haproxy"]), ">= 2.0x")
print(f"{'new connections/s, same ECDSA leaf':<72}{r(nc['proxy'],nc['haproxy_ecdsa']):>8.2f}  >= 1.4x")
row("CPU us per keep-alive request", kacpu, r(kacpu["proxy"],kacpu["haproxy"]), "(lower is better)", "{:.1f}")
row("CPU us per new connection", nccpu, r(nccpu["proxy"],nccpu["haproxy"]), "(lower is better)", "{:.0f}")
row("added p50 latency c=1 (us)", add50, r(add50["proxy"],add50["haproxy"]), "-")
row("added p99 latency c=1 (us)", add99, r(add99["proxy"],add99["haproxy"]), "<= 0.7x")
print(f"{'idle RSS (KiB, fresh process)':<52}{${IDLE_HAPROXY}:>10}{'':>10}{${IDLE_PROXY}:>10}{${IDLE_PROXY}/${IDLE_HAPROXY}:>8.2f}  <= 5 MB")
print(f"{'idle RssAnon (KiB, fresh process)':<52}{${ANON_HAPROXY}:>10}{'':>10}{${ANON_PROXY}:>10}{${ANON_PROXY}/${ANON_HAPROXY}:>8.2f}")
print(f"{'bytes per idle TLS conn (reencrypt)':<52}{${PER_TLS_HAPROXY}:>10}{'':>10}{${PER_TLS_PROXY}:>10}{${PER_TLS_PROXY}/max(1,${PER_TLS_HAPROXY}):>8.2f}  <= 16 KB")
print(f"{'bytes per idle passthrough conn':<72}{${PER_L4_PROXY}:>10}  <= 4 KB")
print(f"{'RSS after the load (KiB)':<52}{${RSS_AFTER_HAPROXY}:>10}{'':>10}{${RSS_AFTER_PROXY}:>10}")
print(f"{'CPU seconds used in the whole run':<52}{${CPU_HAPROXY}:>10}{'':>10}{${CPU_PROXY}:>10}")
PY
echo "raw keep-alive: direct[${KA[direct]}] haproxy[${KA[haproxy]}] haproxy_ecdsa[${KA[haproxy_ecdsa]}] proxy[${KA[proxy]}]"
echo "raw new-conn:   direct[${NC[direct]}] haproxy[${NC[haproxy]}] haproxy_ecdsa[${NC[haproxy_ecdsa]}] proxy[${NC[proxy]}]"
echo "raw p50 us:     direct[${P50[direct]}] haproxy[${P50[haproxy]}] haproxy_ecdsa[${P50[haproxy_ecdsa]}] proxy[${P50[proxy]}]"
echo "raw p99 us:     direct[${P99[direct]}] haproxy[${P99[haproxy]}] haproxy_ecdsa[${P99[haproxy_ecdsa]}] proxy[${P99[proxy]}]"
