#!/usr/bin/env bash
# Run tlsfuzzer (github.com/tlsfuzzer/tlsfuzzer) scripts against the node
# proxy in reencrypt mode next to its anchor, HAProxy with k0smotron's
# sidecar config, on loopback only, and record per script and per target the
# conversations passed/failed/total, crashes and hangs of our process (see
# docs/tls-conformance.md for the results and how to read them).
#
#   HAProxy-k0s  $NET.2:7443  k0smotron's frontend/backend, RSA-2048 leaf
#   ours         $NET.3:7443  hcp-ingress proxy, mode reencrypt, same leaf
#                             (OURS_LEAF=ecdsa: the bench rig's P-256 leaf)
#   both ──> $NET.1:8443 shared ingress (HAProxy, SNI) ──> $NET.1:9001 nginx
#
# Fetches and builds nothing: tlsfuzzer is a checkout given by TLSFUZZER_DIR
# (it is not on PyPI), the proxy a binary given by HCP_INGRESS. Its Python
# dependencies (tlslite-ng, ecdsa, six) come from PYTHON's environment, or
# with VENV=DIR from a venv created there with pip if it does not exist.
#
# Our proxy runs under a restart loop: every exit is logged with its status
# and time (a crash in the middle of a script is counted and attributed to
# the conversation that was running, and the rest of the script runs
# against a fresh process). The proxy's stderr (panic messages) is kept.
#
# Env: TLSFUZZER_DIR (required), HCP_INGRESS (required; the multi-subcommand
#      hcp-ingress works too), LOGS (default /tmp/tlsfuzzer-logs/$LABEL),
#      LABEL (default: the binary's name), TARGETS (default "hap ours"),
#      ONLY (space-separated script names, e.g. "test-tls13-finished"),
#      SCRIPT_TIMEOUT (s per script and target, default 600), SEED (default
#      1: the same random sample of conversations for every target),
#      NET (default 127.0.5, away from the benchmark rig's 127.0.0),
#      OURS_LEAF (rsa, default: the anchor's leaf; ecdsa), PYTHON, VENV,
#      RUSTLS_REF (with TARGETS="hap ours ref": a plain rustls server, see
#      below), OURS_EXTRA (YAML lines appended to our config, e.g.
#      "limits: {maxClientHelloBytes: 65536}"), REPORT_ONLY=1 (redo the
#      tables of the run in LOGS).
# Output in $LOGS: <script>.<target>.log (tlsfuzzer's output; .rerunN.log:
# conversations refused while a crashed proxy restarted, run again), .ts
# (start time of each conversation), <script>.ours.metrics (the proxy's
# handshake error counters after the script), ours-exits.log,
# ours-stderr.log, summary.tsv (per run), conversations.tsv (per
# conversation: status, where and why it failed), table.tsv (counts, also
# on stdout), ours-not-hap.tsv (what fails on ours but not on HAProxy, or
# differently, with HAProxy's and the reference's result next to it).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${TLSFUZZER_DIR:?set TLSFUZZER_DIR to a tlsfuzzer checkout}"
: "${HCP_INGRESS:?set HCP_INGRESS to the proxy binary}"
TLSFUZZER_DIR=$(cd "$TLSFUZZER_DIR" && pwd)
HCP_INGRESS=$(realpath "$HCP_INGRESS")
LABEL=${LABEL:-$(basename "$HCP_INGRESS")}
LOGS=${LOGS:-/tmp/tlsfuzzer-logs/$LABEL}
TARGETS=${TARGETS:-hap ours}
SCRIPT_TIMEOUT=${SCRIPT_TIMEOUT:-600}
SEED=${SEED:-1}
NET=${NET:-127.0.5}
OURS_LEAF=${OURS_LEAF:-rsa}

. hack/bench/rig.sh
require haproxy nginx openssl curl timeout
if [ -n "${VENV:-}" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "tlslite-ng==0.9.0b2" ecdsa six
  fi
  PYTHON="$VENV/bin/python"
fi
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import tlslite, ecdsa, six' || { echo "error: $PYTHON lacks tlslite-ng/ecdsa/six (set VENV=DIR)" >&2; exit 1; }
analyze() {
# Per conversation (conversations.tsv): status and, when failed, the node
# tlsfuzzer was at and the error's last line; a crash is attributed to the
# conversation running when the process exited; conversations refused
# while it restarted take their rerun's result. table.tsv: the counts.
"$PYTHON" - "$LOGS" "$SUMMARY" "$EXITS" <<'EOF'
import bisect, collections, csv, os, re, sys
csv.field_size_limit(1 << 30)
logs, summary, exits = sys.argv[1:4]
ex = [(float(t), rc) for t, rc in (l.split() for l in open(exits) if l.strip())] if os.path.exists(exits) else []

def parse(base):
    """[(name, status, detail)] of one tlsfuzzer run, crashes attributed."""
    lines = open(base + ".log", errors="replace").read().splitlines()
    starts = [l.rstrip("\n").split(" ", 1) for l in open(base + ".log.ts") if " " in l]
    end = float(starts[-1][0]) if starts and starts[-1][1] == "__END__" else float("inf")
    starts = [(float(t), n) for t, n in starts if n != "__END__"]
    times = [t for t, _ in starts]
    crashed = collections.defaultdict(list)
    for t, rc in (ex if ".ours" in os.path.basename(base) else []):
        i = bisect.bisect_right(times, t) - 1
        if i >= 0 and t <= end:
            crashed[i].append(rc)
    names = [n for _, n in starts]
    if not names:  # a script that does not end its names with "...": a
        # name is the line before a result (no crash attribution then)
        for i, l in enumerate(lines[:-1]):
            nxt = lines[i + 1]
            if l and (i == 0 or not lines[i - 1]) and (nxt in ("OK", "Error while processing")
                    or nxt.startswith(("Error encountered", "OK-expected", "XPASS"))):
                names.append(l)
                lines[i] = l + " ..."
    out, idx, cur = [], -1, None
    def flush():
        if cur is None:
            return
        name, st, node, err = cur
        detail = ""
        if st == "FAIL":
            msgs = [l for l in err if re.match(r"^[\w.]*(Error|Exception|Timeout)\w*:", l)]
            detail = msgs[-1] if msgs else (err[-1] if err else "")
            if node:
                detail = "at %s: %s" % (node, detail)
        if idx in crashed:
            detail = ("CRASH exit=%s; " % ",".join(crashed[idx])) + detail
        if len(detail) > 300:
            detail = detail[:300] + "..."
        out.append((name, st, detail.replace("\t", " "), idx in crashed))
    for l in lines:
        if idx + 1 < len(names) and l.endswith("...") and l[:-3].rstrip(" ") == names[idx + 1]:
            flush()
            idx += 1
            cur = [names[idx], "?", "", []]
            continue
        if cur is None:
            continue
        m = re.match(r"Error encountered while processing node (.*?) \(child: ", l)
        if m:
            node = re.sub(r"<(?:\w+\.)*(\w+) object at 0x[0-9a-f]+>", r"\1", m.group(1))
            if len(node) > 60:  # generators print their whole message
                node = re.match(r"\w+", node).group(0)
            cur[2] = node
        if l == "OK":
            cur[1] = "OK"
        elif l.startswith("OK-expected failure"):
            cur[1] = "XFAIL"
        elif l.startswith("XPASS"):
            cur[1] = "XPASS"
        elif l == "Error while processing":
            cur[1] = "FAIL"
        elif cur[1] == "FAIL" and l.strip():
            cur[3].append(l.strip())
        if l.startswith("Test end"):
            flush()
            cur = None
    flush()
    return out

conv = open(os.path.join(logs, "conversations.tsv"), "w")
conv.write("script\ttarget\tconversation\tstatus\tdetail\n")
table = open(os.path.join(logs, "table.tsv"), "w")
table.write("script\ttarget\ttotal\tpass\tfail\tcrashes\trefused_after_rerun\thung\thello_refused\n")
prev = {}
def hello_refused(script):
    """The proxy's handshake_errors_total by reason (malformed, oversized,
    not_tls: its ClientHello parser) during this script: the delta of the
    counters read after it and after the script before (same process
    unless it crashed)."""
    global prev
    path = os.path.join(logs, script + ".ours.metrics")
    if not os.path.exists(path):
        return "-"
    cur = {}
    for l in open(path):
        m = re.match(r'\w+\{reason="(\w+)"\} (\d+)', l)
        if m:
            cur[m.group(1)] = int(m.group(2))
    d = {k: v - prev.get(k, 0) for k, v in cur.items()}
    prev = cur
    if any(v < 0 for v in d.values()):  # restarted: counters began again
        d = cur
    return ",".join("%s=%d" % (k, d.get(k, 0)) for k in ("malformed", "oversized", "not_tls") if d.get(k, 0)) or "0"
seen = set()
for row in csv.DictReader(open(summary), delimiter="\t"):
    key = (row["script"], row["target"])
    if key in seen:
        continue
    seen.add(key)
    base = os.path.join(logs, "%s.%s" % key)
    res = parse(base)
    crashes = sum(c for *_, c in res)
    for n in (1, 2, 3):
        if not os.path.exists("%s.rerun%d.log" % (base, n)):
            break
        again = parse("%s.rerun%d" % (base, n))
        crashes += sum(c for *_, c in again)
        byname = collections.defaultdict(list)
        for r in again:
            byname[r[0]].append(r)
        for i, (name, st, detail, c) in enumerate(res):
            if "ConnectionRefusedError" in detail and byname.get(name):
                r = byname[name].pop(0)
                res[i] = (name, r[1], (r[2] + " (rerun %d)" % n).strip(), c or r[3])
    hr = hello_refused(key[0]) if key[1] == "ours" else "-"
    if res == [] and row["total"] == "-":
        table.write("%s\t%s\t-\t-\t-\t%d\t-\t%s\t%s\n" % (key[0], key[1], crashes, row["hung"], hr))
        continue
    ok = sum(1 for r in res if r[1] in ("OK", "XFAIL"))
    refused = sum(1 for r in res if "ConnectionRefusedError" in r[2])
    table.write("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n" % (key[0], key[1], len(res), ok, len(res) - ok, crashes, refused, row["hung"], hr))
    for name, st, detail, _ in res:
        conv.write("%s\t%s\t%s\t%s\t%s\n" % (key[0], key[1], name.replace("\t", " "), st, detail))
EOF

# Conversations that do not pass on ours but pass on HAProxy-k0s, or fail
# on both differently (same script, same name, same occurrence).
"$PYTHON" - "$LOGS/conversations.tsv" > "$LOGS/ours-not-hap.tsv" <<'EOF'
import collections, csv, re, sys
csv.field_size_limit(1 << 30)
res = collections.defaultdict(dict)
count = collections.Counter()
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t", quoting=csv.QUOTE_NONE):
    k = (r["script"], r["target"], r["conversation"])
    count[k] += 1
    res[(r["script"], r["conversation"], count[k])][r["target"]] = (r["status"], r["detail"])
print("script\tconversation\thap\tours\tref\tours_detail\thap_detail\tref_detail")
norm = lambda d: re.sub(r"0x[0-9a-f]+| \(rerun \d\)", "", d)
for (s, c, n), t in res.items():
    if "ours" not in t or "hap" not in t:
        continue
    (hs, hd), (os_, od) = t["hap"], t["ours"]
    if os_ in ("OK", "XFAIL") or (hs == os_ and norm(hd) == norm(od)):
        continue
    rs, rd = t.get("ref", ("-", ""))
    print("\t".join([s, c if n == 1 else "%s #%d" % (c, n), hs, os_, rs, od, hd, rd]))
EOF
}
SUMMARY="$LOGS/summary.tsv"
EXITS="$LOGS/ours-exits.log"
# REPORT_ONLY=1: redo the per-conversation tables of an earlier run in LOGS.
if [ "${REPORT_ONLY:-}" = 1 ]; then analyze; column -t -s $'\t' "$LOGS/table.tsv"; exit 0; fi
mkdir -p "$LOGS"
workdir tlsfuzzer

# --- PKI: cluster CA, tenant cert, k0smotron's RSA-2048 proxy leaf, the
# bench's ECDSA P-256 leaf.
rig_pki "tlsfuzzer cluster CA" "IP:$NET.2,IP:$NET.3"

# --- tenant stand-in (nginx, TLS, as hack/bench-proxy.sh's tenant A).
{ nginx_head backend 4096 1024 60s; nginx_server "$NET.1:9001 ssl" tenant-a "$TENANT_BODY"; echo "}"; } > "$W/backend.conf"
nginx -p "$W" -c "$W/backend.conf" & PIDS+=($!)

# --- shared ingress (HAProxy, SNI routing) and the anchor, HAProxy with
# k0smotron's sidecar frontend/backend verbatim (as hack/bench-proxy.sh).
ingress_cfg "" 5m "$NET.1:8443" "$NET.1:9001" > "$W/ingress.cfg"
haproxy -db -f "$W/ingress.cfg" & PIDS+=($!)
sidecar_cfg "" 5m "$NET.2:7443" "ssl crt $W/k0s-rsa.pem" "$(k0s_upstream "$NET.1:8443")" > "$W/hap-k0s.cfg"
haproxy -db -f "$W/hap-k0s.cfg" 2>"$LOGS/hap-stderr.log" & PIDS+=($!)
HAP_PID=$!

# --- ours, reencrypt, under a restart loop that logs every exit.
case $OURS_LEAF in
  rsa) LEAF=k0s-rsa ;;
  ecdsa) LEAF=ecdsa ;;
  *) echo "error: OURS_LEAF is rsa or ecdsa" >&2; exit 1 ;;
esac
cat > "$W/ours.yaml" <<EOF
listen: {address: $NET.3, port: 7443}
mode: reencrypt
upstream:
  serverName: $API
  port: 8443
  addresses: ["$NET.1"]
  caFile: $W/ca.crt
tls: {certFile: $W/$LEAF.crt, keyFile: $W/$LEAF.key}
admin: {address: "$NET.3:9445"}
log: {level: warn}
workerThreads: 1
${OURS_EXTRA:-}
EOF
proxy_argv "$HCP_INGRESS"
EXITS="$LOGS/ours-exits.log"
: > "$EXITS"
: > "$LOGS/ours-stderr.log"
SUPERVISOR=""
has_ours() { [[ " $TARGETS " == *" ours "* ]]; }
supervise() {
  trap 'kill "$(cat "$W/ours.pid")" 2>/dev/null; exit 0' TERM
  while :; do
    "${PROXY_ARGV[@]}" --config "$W/ours.yaml" 2>>"$LOGS/ours-stderr.log" & echo $! > "$W/ours.pid"
    rc=0; wait $! || rc=$?
    echo "$EPOCHREALTIME $rc" >> "$EXITS"
    echo "=== exit $rc at $EPOCHREALTIME" >> "$LOGS/ours-stderr.log"
    sleep 0.2
  done
}
if has_ours; then
  supervise & PIDS+=($!)
  SUPERVISOR=$!
fi
stop_ours() { [ -z "$SUPERVISOR" ] || kill "$SUPERVISOR" 2>/dev/null || true; }
trap 'stop_ours; rig_cleanup' EXIT

# Optional third target "ref" (TARGETS="hap ours ref", RUSTLS_REF=BIN): a
# plain rustls server, invoked as `BIN ADDR:PORT CERT KEY`, with the same
# leaf; it tells rustls's own behaviour from the proxy's.
if [[ " $TARGETS " == *" ref "* ]]; then
  : "${RUSTLS_REF:?TARGETS has ref: set RUSTLS_REF}"
  "$RUSTLS_REF" "$NET.4:7443" "$W/$LEAF.crt" "$W/$LEAF.key" 2>"$LOGS/ref-stderr.log" & PIDS+=($!)
  REF_PID=$!
fi

wait_ok "https://$NET.1:9001/"
wait_ok "https://$NET.2:7443/"
if has_ours; then wait_ok "http://$NET.3:9445/readyz"; wait_ok "https://$NET.3:7443/"; fi
if [ -n "${REF_PID:-}" ]; then wait_ok "https://$NET.4:7443/"; fi

declare -A HOST=([hap]=$NET.2 [ours]=$NET.3 [ref]=$NET.4)
# Size of the tenant's answer to tlsfuzzer's default request (HTTP/1.0 GET),
# for test-record-size-limit.
REPLY_SIZE=$(python3 - "$NET.2" <<'EOF'
import socket, ssl, sys
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
s = c.wrap_socket(socket.create_connection((sys.argv[1], 7443)))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
n = 0
while True:
    try:
        b = s.recv(65536)
    except (ssl.SSLError, OSError):
        break
    if not b:
        break
    n += len(b)
print(n)
EOF
)
# Script (name as in tlsfuzzer/scripts/) and its arguments beyond -h -p.
# TLS 1.2 ones that take -C run with ECDHE-RSA-AES128-GCM (rustls, thus our
# proxy, has no CBC and no RSA key exchange); -n caps the random sample.
# The last ones offer CBC suites only (no -C): their positive paths cannot
# complete on ours, their malformed-ClientHello conversations still compare.
GCM12=(-d -C TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
SCRIPTS=(
  "test-tls13-conversation"
  "test-tls13-finished -n 200"
  "test-tls13-finished-plaintext"
  "test-tls13-keyupdate -n 60"
  "test-tls13-keyupdate-from-server"
  "test-tls13-record-padding"
  "test-tls13-zero-length-data"
  "test-tls13-zero-content-type"
  "test-tls13-record-layer-limits -n 50"
  "test-tls13-lengths -n 40"
  "test-tls13-version-negotiation ${GCM12[*]}"
  "test-tls13-legacy-version"
  "test-tls13-connection-abort"
  "test-tls13-empty-alert"
  "test-tls13-unencrypted-alert"
  "test-tls13-ccs"
  "test-tls13-multiple-ccs-messages"
  "test-tls13-count-tickets"
  "test-tls13-nociphers"
  "test-tls13-invalid-ciphers"
  "test-tls13-symetric-ciphers"
  "test-tls13-0rtt-garbage"
  "test-tls13-hrr"
  "test-tls13-keyshare-omitted"
  "test-tls13-unrecognised-groups"
  "test-tls13-large-number-of-extensions"
  "test-tls13-shuffled-extentions"
  "test-tls13-serverhello-random"
  "test-tls13-signature-algorithms -n 20"
  "test-tls13-rsapss-signatures"
  "test-tls13-ecdhe-curves"
  "test-conversation ${GCM12[*]}"
  "test-large-hello -d -n 50"
  "test-record-layer-fragmentation ${GCM12[*]}"
  "test-version-numbers ${GCM12[*]}"
  "test-connection-abort ${GCM12[*]}"
  "test-ccs ${GCM12[*]}"
  "test-fuzzed-ciphertext ${GCM12[*]} -n 100"
  "test-fuzzed-plaintext -C TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -n 100"
  "test-aes-gcm-nonces ${GCM12[*]}"
  "test-chacha20"
  "test-zero-length-data ${GCM12[*]}"
  "test-invalid-content-type ${GCM12[*]}"
  "test-truncating-of-client-hello ${GCM12[*]}"
  "test-invalid-client-hello-w-record-overflow ${GCM12[*]}"
  "test-lengths ${GCM12[*]} -n 40"
  "test-hello-request-by-client ${GCM12[*]}"
  "test-invalid-compression-methods ${GCM12[*]}"
  "test-renegotiation-disabled ${GCM12[*]}"
  "test-interleaved-CKE-with-CCS -C TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
  "test-ecdhe-rsa-key-exchange-with-bad-messages -C TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
  "test-downgrade-protection -d --server-max-protocol=TLSv1.3"
  "test-record-size-limit --reply-AD-size $REPLY_SIZE -n 50"
  "test-invalid-client-hello"
  "test-client-hello-max-size -d"
  "test-large-number-of-extensions -d"
  "test-invalid-cipher-suites"
  "test-invalid-session-id"
  "test-invalid-server-name-extension -d"
  "test-empty-extensions"
  "test-extensions"
)

# run SCRIPT TARGET TAG ARGS...: tlsfuzzer's output in LOG
# ($LOGS/SCRIPT.TARGET[TAG].log), the start time of each conversation and
# the end in LOG.ts; prints "rc seconds".
run() {
  local s=$1 t=$2 log="$LOGS/$1.$2$3.log"; shift 3
  local t0=$EPOCHREALTIME rc
  : > "$log.ts"
  set +e
  # The sample of conversations is random: seeded, every target gets the same.
  timeout -k 10 "$SCRIPT_TIMEOUT" "$PYTHON" -u -c '
import random, runpy, sys
random.seed(int(sys.argv[1]))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
' "$SEED" "$TLSFUZZER_DIR/scripts/$s.py" -h "${HOST[$t]}" -p 7443 "$@" 2>&1 |
    while IFS= read -r l; do
      printf '%s\n' "$l" >> "$log"
      case $l in *"...") n=${l%...}; printf '%s %s\n' "$EPOCHREALTIME" "${n% }" >> "$log.ts" ;; esac
    done
  rc=${PIPESTATUS[0]}
  set -e
  printf '%s __END__\n' "$EPOCHREALTIME" >> "$log.ts"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN {printf "%d %.1f\n", rc, b - a}'
}

SUMMARY="$LOGS/summary.tsv"
printf 'script\ttarget\trc\tseconds\ttotal\tpass\tfail\txfail\txpass\tcrashes\thung\talive_after\n' > "$SUMMARY"
{
  echo "tlsfuzzer $(git -C "$TLSFUZZER_DIR" rev-parse HEAD 2>/dev/null || cat "$TLSFUZZER_DIR/COMMIT" 2>/dev/null || echo unknown)"
  haproxy -v | sed -n 1p
  echo "proxy $HCP_INGRESS sha256 $(sha256sum "$HCP_INGRESS" | cut -d' ' -f1) leaf $OURS_LEAF"
  "$PYTHON" -c 'import tlslite, ecdsa; print("tlslite-ng", tlslite.__version__, "ecdsa", ecdsa.__version__)'
  echo "seed $SEED timeout $SCRIPT_TIMEOUT net $NET"
} > "$LOGS/versions.txt"
for entry in "${SCRIPTS[@]}"; do
  read -ra argv <<< "$entry"
  s=${argv[0]}
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $s "* ]]; then continue; fi
  for t in $TARGETS; do
    exits0=$(wc -l < "$EXITS")
    read -r rc secs < <(run "$s" "$t" "" "${argv[@]:1}")
    sleep 0.5
    # Conversations refused while a crashed process restarted run again, by
    # name, in LOG.rerunN (up to 3 times: a rerun may crash it again).
    prev="$LOGS/$s.$t.log"
    for pass in 1 2 3; do
      mapfile -t refused < <(awk '/\.\.\.$/ {n = $0; sub(/ ?\.\.\.$/, "", n)} /ConnectionRefusedError/ {print n}' "$prev" | sort -u)
      [ "${#refused[@]}" -gt 0 ] || break
      wait_ok "https://${HOST[$t]}:7443/" 2>/dev/null || true
      run "$s" "$t" ".rerun$pass" "${argv[@]:1}" "${refused[@]}" > /dev/null
      sleep 0.5
      prev="$LOGS/$s.$t.rerun$pass.log"
    done
    crashes=$(( $(wc -l < "$EXITS") - exits0 ))
    if [ "$t" = ours ]; then  # the proxy's own count of refused handshakes, by reason
      curl -s --max-time 2 "http://$NET.3:9445/metrics" | grep -E '^hcp_proxy_(handshake|hello|clienthello)[a-z_]*\{' > "$LOGS/$s.ours.metrics" || true
    fi
    hung=0; [ "$rc" = 124 ] || [ "$rc" = 137 ] && hung=1
    alive=yes
    case $t in
      ours) wait_ok "https://$NET.3:7443/" 2>/dev/null || alive=no ;;
      hap) kill -0 "$HAP_PID" 2>/dev/null && wait_ok "https://$NET.2:7443/" 2>/dev/null || alive=no ;;
      ref) kill -0 "$REF_PID" 2>/dev/null && wait_ok "https://$NET.4:7443/" 2>/dev/null || alive=no ;;
    esac
    read -r total pass fail xfail xpass < <(awk '
      /^TOTAL: / {to=$2} /^PASS: / {p=$2} /^FAIL: / {f=$2} /^XFAIL: / {xf=$2} /^XPASS: / {xp=$2}
      END {print (to==""?"-":to), (p==""?"-":p), (f==""?"-":f), (xf==""?"-":xf), (xp==""?"-":xp)}' "$LOGS/$s.$t.log")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$t" "$rc" "$secs" "$total" "$pass" "$fail" "$xfail" "$xpass" "$crashes" "$hung" "$alive" >> "$SUMMARY"
    echo "$s $t: rc=$rc ${secs}s total=$total pass=$pass fail=$fail crashes=$crashes hung=$hung alive=$alive" >&2
  done
done

analyze
column -t -s $'\t' "$LOGS/table.tsv"
