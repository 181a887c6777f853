#!/usr/bin/env bash
# Hold N (default 10,000) concurrent TLS connections through `hcp-ingress
# proxy` for HOLD seconds with bounded memory, then prove every one still
# works and that connections beyond limits.maxConnections are refused at
# once and counted. The HAProxy anchor (k0smotron's sidecar config, see
# ../shared/PERF.md) gets the same N connections afterwards, side by side.
#
#   idle_conns.py ──> 127.0.0.3:7443 hcp-ingress proxy (ECDSA leaf, reencrypt)
#                 ──> 127.0.0.2:7443 HAProxy anchor (RSA-2048 leaf)
#   both ──> 127.0.0.1:8443 shared ingress (HAProxy, SNI) ──> 127.0.0.1:9001 tenant (nginx, TLS)
#
# Loopback only. Packages: haproxy nginx openssl python3 curl.
# Env: N (10000), HOLD (s, 60), EXTRA (connections beyond the limit, 100),
#      ANCHOR (1: also measure HAProxy; 0: skip), ANCHOR_HOLD (s, 10),
#      HCP_INGRESS (binary; default: hcp-ingress-proxy from cargo build
#      --profile load).
#
# Each proxied connection costs the proxy (and each HAProxy) two file
# descriptors; N is lowered, with a warning, when the hard limit cannot hold
# 2N of them.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-10000}
HOLD=${HOLD:-60}
EXTRA=${EXTRA:-100}
ANCHOR=${ANCHOR:-1}
ANCHOR_HOLD=${ANCHOR_HOLD:-10}

. hack/bench/rig.sh
require haproxy nginx openssl python3 curl
ulimit -n 1048576 2>/dev/null || ulimit -n 262144 2>/dev/null || ulimit -n "$(ulimit -Hn)"
FDS=$(ulimit -n)
MAXN=$(( (FDS - 200) / 2 ))
if [ "$N" -gt "$MAXN" ]; then
  echo "warning: RLIMIT_NOFILE is $FDS (the hard limit; raising it needs CAP_SYS_RESOURCE): holding N=$MAXN connections instead of $N" >&2
  N=$MAXN
fi
proxy_binary load
# Every process under test starts from a cold page cache, as on a node.
evict "$HCP_INGRESS" "$(command -v haproxy)"
workdir load-proxy

rig_pki "load cluster CA" "IP:127.0.0.2,IP:127.0.0.3"

# The tenant stand-in and the shared ingress (SNI routing), both sized for
# N connections held at once.
CONNS=$(( N + EXTRA + 1000 ))
# HAProxy wants 2 x maxconn descriptors; the EXTRA never reach the ingress.
HAP_MAXCONN=$(( N + 10 ))
{
  nginx_head backends "$FDS" "$CONNS" 600s
  nginx_server "127.0.0.1:9001 ssl backlog=4096" tenant-a '{"tenant":"a"}'
  echo "}"
} > "$W/backends.conf"
nginx -p "$W" -c "$W/backends.conf" & PIDS+=($!)

ingress_cfg "$HAP_MAXCONN" 10m 127.0.0.1:8443 127.0.0.1:9001 "backlog 4096" > "$W/ingress.cfg"
haproxy -db -f "$W/ingress.cfg" 2>"$W/ingress.log" & PIDS+=($!)

cat > "$W/proxy.yaml" <<CONF
listen: {address: 127.0.0.3, port: 7443, backlog: 4096}
mode: reencrypt
upstream:
  serverName: $API
  port: 8443
  addresses: ["127.0.0.1"]
  caFile: $W/ca.crt
tls: {certFile: $W/ecdsa.crt, keyFile: $W/ecdsa.key}
admin: {address: "127.0.0.3:9445"}
limits: {maxConnections: $N}
timeouts: {idle: 10m}
log: {level: warn}
CONF
proxy_argv "$HCP_INGRESS"
"${PROXY_ARGV[@]}" --config "$W/proxy.yaml" 2>"$W/proxy.log" & PROXY_PID=$!; PIDS+=($PROXY_PID)

wait_ok https://127.0.0.1:9001/
wait_ok http://127.0.0.3:9445/readyz

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }  # pid VmRSS|RssAnon
metric() { curl -s http://127.0.0.3:9445/metrics | awk -v m="$1" '$1 == m {print $2}'; }
ready_count() { awk '/^ready/ {print $2}' "$1" 2>/dev/null; }

# hold PID HOST PORT OUT FD: open N connections from idle_conns.py, fed by
# the fifo on descriptor FD; returns once all answered.
hold() {
  local host=$1 port=$2 out=$3 fd=$4 fifo="$W/fifo.$4"
  mkfifo "$fifo"
  python3 hack/bench/idle_conns.py "$host" "$port" "$N" --ca "$W/ca.crt" --concurrency 100 \
    < "$fifo" > "$out" 2> "$out.err" & PIDS+=($!)
  eval "exec $fd>\"$fifo\""
  for _ in $(seq 1 6000); do [ -n "$(ready_count "$out")" ] && return 0; sleep 0.1; done
  echo "error: the client never opened its connections" >&2; cat "$out.err" >&2; exit 1
}
# measure NAME PID HOST PORT FD HOLD
measure() {
  local name=$1 pid=$2 host=$3 port=$4 fd=$5 secs=$6 out="$W/$1.out" t0 t1 peak=0 r
  eval "IDLE_$name=$(kib "$pid" VmRSS) IDLEANON_$name=$(kib "$pid" RssAnon)"
  t0=$(date +%s.%N)
  hold "$host" "$port" "$out" "$fd"
  t1=$(date +%s.%N)
  eval "OPENED_$name=$(ready_count "$out") OPEN_SECS_$name=$(python3 -c "print(round($t1-$t0,1))")"
  eval "LOADED_$name=$(kib "$pid" VmRSS) LOADEDANON_$name=$(kib "$pid" RssAnon)"
  if [ "$name" = proxy ]; then
    ACTIVE_PROXY=$(metric 'hcp_proxy_connections_active{path="reencrypt"}')
    # Beyond the limit: each extra client must be reset at once and counted.
    python3 hack/bench/idle_conns.py "$host" "$port" "$EXTRA" --ca "$W/ca.crt" < /dev/null > "$W/extra.out" 2> "$W/extra.err" || true
    EXTRA_OPENED=$(ready_count "$W/extra.out")
    EXTRA_ERRORS=$(cat "$W/extra.err")
    REFUSED=$(metric 'hcp_proxy_connections_refused_total{reason="limit"}')
  fi
  echo "$name: $(ready_count "$out") connections open; holding ${secs}s" >&2
  local end=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt "$end" ]; do
    r=$(kib "$pid" VmRSS); [ "$r" -gt "$peak" ] && peak=$r
    sleep 2
  done
  eval "PEAK_$name=$peak HELD_$name=$(kib "$pid" VmRSS) HELDANON_$name=$(kib "$pid" RssAnon)"
  # One more request on every held connection: they all still work.
  echo request >&"$fd"
  for _ in $(seq 1 6000); do grep -q '^requested' "$out" && break; sleep 0.1; done
  eval "REQ_$name=\"$(grep '^requested' "$out")\""
  eval "exec $fd>&-"
  sleep 3
  eval "CLOSED_$name=$(kib "$pid" VmRSS)"
}

measure proxy "$PROXY_PID" 127.0.0.3 7443 8 "$HOLD"
ACTIVE_AFTER=$(metric 'hcp_proxy_connections_active{path="reencrypt"}')
kill -0 "$PROXY_PID"

# The anchor, HAProxy with k0smotron's sidecar config and its RSA-2048 leaf,
# started only now, so that our proxy had the machine to itself.
if [ "$ANCHOR" = 1 ]; then
  sidecar_cfg "$HAP_MAXCONN" 10m 127.0.0.2:7443 "ssl crt $W/k0s-rsa.pem backlog 4096" "$(k0s_upstream 127.0.0.1:8443)" > "$W/anchor.cfg"
  haproxy -db -f "$W/anchor.cfg" 2>"$W/anchor.log" & ANCHOR_PID=$!; PIDS+=($ANCHOR_PID)
  wait_ok https://127.0.0.2:7443/
  sleep 1
  measure haproxy "$ANCHOR_PID" 127.0.0.2 7443 9 "$ANCHOR_HOLD"
fi

export N HOLD EXTRA ANCHOR ANCHOR_HOLD ACTIVE_PROXY ACTIVE_AFTER REFUSED EXTRA_ERRORS
export EXTRA_OPENED=${EXTRA_OPENED:-0}
for name in proxy haproxy; do
  for v in IDLE IDLEANON LOADED LOADEDANON PEAK HELD HELDANON CLOSED OPENED OPEN_SECS REQ; do
    eval "export ${v}_$name=\"\${${v}_$name:-0}\""
  done
done
python3 - <<'PY'
import os
e = os.environ
def per(a, b, n): return round((int(b) - int(a)) * 1024 / max(1, int(n)))
print(f"# {e['OPENED_proxy']} TLS connections through hcp-ingress proxy (reencrypt, 1 thread), held {e['HOLD']}s")
print(f"opened in {e['OPEN_SECS_proxy']} s (python client, concurrency 100); active gauge: {e['ACTIVE_PROXY']}")
print(f"beyond limits.maxConnections={e['N']}: {e['EXTRA']} more attempted, {e['EXTRA_OPENED']} served, "
      f"hcp_proxy_connections_refused_total{{reason=\"limit\"}} = {e['REFUSED']} (client: {e['EXTRA_ERRORS']})")
print(f"after the hold: {e['REQ_proxy']}; proxy alive; active after close: {e['ACTIVE_AFTER']}")
names = ["proxy"] + (["haproxy"] if e["ANCHOR"] == "1" else [])
if e["ANCHOR"] == "1":
    print(f"haproxy anchor (k0smotron config, RSA leaf), {e['OPENED_haproxy']} connections held {e['ANCHOR_HOLD']}s: {e['REQ_haproxy']}")
print(f"{'':<9}{'idle RSS':>10}{'idle anon':>10}{'loaded':>10}{'anon':>10}{'peak':>10}{'held end':>10}{'anon':>10}{'closed':>10}{'B/conn RSS':>12}{'B/conn anon':>12}")
for n in names:
    g = lambda k: e[f"{k}_{n}"]
    print(f"{n:<9}{g('IDLE'):>10}{g('IDLEANON'):>10}{g('LOADED'):>10}{g('LOADEDANON'):>10}{g('PEAK'):>10}{g('HELD'):>10}"
          f"{g('HELDANON'):>10}{g('CLOSED'):>10}{per(g('IDLE'), g('HELD'), g('OPENED')):>12}{per(g('IDLEANON'), g('HELDANON'), g('OPENED')):>12}")
print("(KiB; 'held end' = after the hold, before closing; per connection = (held end - idle) / opened)")
PY
