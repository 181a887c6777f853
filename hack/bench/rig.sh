# The set-up every benchmark rig shares (sourced by hack/bench-proxy.sh,
# hack/bench-proxy-pooled.sh, hack/load-proxy.sh and hack/tlsfuzzer.sh, from
# the repository root).
#
# Every rig is the same picture on loopback (../shared/PERF.md), X being the
# script's own addresses in 127/8 (its header draws its rig in full):
#   X.1:9001  tenant A's API stand-in, nginx    nginx_head, nginx_server
#   X.1:8443  the shared ingress, HAProxy       ingress_cfg
#   X.2:7443  the anchor, a HAProxy sidecar     sidecar_cfg, k0s_upstream
#   X.3:7443  our node proxy                    (each script's own config)
# with the certificates of rig_pki. Each script writes the configs into W
# (workdir) and starts the processes itself, so that it keeps their PIDs and
# chooses where their output goes.

# require TOOL...: stop with the packages to install when a tool is missing.
require() {
  local bin pkgs=()
  for bin in "$@"; do
    case "$bin" in
      ss) pkgs+=(iproute2) ;;
      perf) pkgs+=(linux-perf) ;;
      nm | readelf) pkgs+=(binutils) ;;
      *) pkgs+=("$bin") ;;
    esac
  done
  for bin in "$@"; do
    command -v "$bin" >/dev/null || { echo "error: $bin is required (apt-get install -y ${pkgs[*]})" >&2; exit 1; }
  done
}

# proxy_binary PROFILE: HCP_INGRESS as given, or the proxy-only binary (what
# the DaemonSet runs) built with that cargo profile; for TARGET when set
# (x86_64-unknown-linux-musl: the static binary the image ships, with musl's
# allocator; needs `rustup target add` and Debian's musl-tools).
proxy_binary() {
  if [ -z "${HCP_INGRESS:-}" ]; then
    if [ -n "${TARGET:-}" ]; then
      cargo build --profile "$1" --target "$TARGET" -p hcp-ingress-proxy --bin hcp-ingress-proxy >&2
      HCP_INGRESS="${CARGO_TARGET_DIR:-target}/$TARGET/$1/hcp-ingress-proxy"
    else
      cargo build --profile "$1" -p hcp-ingress-proxy --bin hcp-ingress-proxy >&2
      HCP_INGRESS="${CARGO_TARGET_DIR:-target}/$1/hcp-ingress-proxy"
    fi
  fi
}

# evict FILE...: drop the files' pages from the page cache (those no process
# maps), so that the next process to start reads them as on a node that just
# pulled the image. A file just written, a fresh build, sits in the page cache
# in large folios that the kernel maps whole: its first process would count
# all of its text as resident instead of 64 KiB around each page it touches.
evict() {
  python3 - "$@" <<'EOF'
import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # dirty pages cannot be dropped
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
}

# proxy_argv BIN: PROXY_ARGV, the command that starts BIN's node proxy: the
# proxy-only binary as it is, the multi-subcommand one with `proxy` (so an
# A/B run can set either against the other).
proxy_argv() {
  PROXY_ARGV=("$1")
  if [ "$(basename "$1")" = hcp-ingress ]; then PROXY_ARGV+=(proxy); fi
}

# workdir NAME: W, a fresh folder nginx's worker user can read, and PIDS,
# the processes started; on exit every one of them is stopped and W is removed.
workdir() {
  W=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$W"
  PIDS=()
  trap rig_cleanup EXIT
}

rig_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}

# API: tenant A's API host name: its certificate's name, the SNI the ingress
# routes by, the name every proxy verifies upstream.
API=api.tenant-a.example.com

# TENANT_BODY: what the tenant stand-ins answer, a ~260-byte Status as an
# API server sends.
TENANT_BODY='{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","message":"tenant-a api stand-in","reason":"","details":{"name":"bench","kind":"pods"},"code":200,"padding":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'

# nginx_head NAME [FDS] [WORKER_CONNECTIONS] [KEEPALIVE_TIMEOUT]: the start of
# the config of a tenant stand-in nginx running in the foreground under W
# (pid and error log named NAME), into its http block: session tickets and
# cache on, keep-alive for the whole run. The caller adds the servers and
# closes the block.
nginx_head() {
  mkdir -p "$W/tmp"
  cat <<EOF
daemon off;
master_process off;
worker_rlimit_nofile ${2:-65536};
pid $W/$1.pid;
error_log $W/$1-error.log warn;
events { worker_connections ${3:-16384}; }
http {
  access_log off;
  client_body_temp_path $W/tmp; proxy_temp_path $W/tmp; fastcgi_temp_path $W/tmp; uwsgi_temp_path $W/tmp; scgi_temp_path $W/tmp;
  keepalive_requests 1000000;
  keepalive_timeout ${4:-300s};
  ssl_session_tickets on;
  ssl_session_cache shared:SSL:10m;
  default_type application/json;
EOF
}

# nginx_server LISTEN CERT BODY [DIRECTIVE...]: on stdout, one server block of
# a tenant stand-in, for inside nginx_head's http block: TLS on LISTEN (the
# parameters of nginx's listen, e.g. "127.0.0.1:9001 ssl http2"), with the
# certificate CERT from rig_pki (W/CERT.crt and .key), answering every
# request with BODY; each DIRECTIVE is one more line of the block.
nginx_server() {
  local d
  cat <<EOF
  server {
    listen $1;
    ssl_certificate $W/$2.crt; ssl_certificate_key $W/$2.key;
EOF
  for d in "${@:4}"; do echo "    $d"; done
  cat <<EOF
    location / { return 200 '$3'; }
  }
EOF
}

# hap_head MAXCONN TIMEOUT [MODE]: on stdout, the global and defaults
# sections of every HAProxy of the rig: one thread (as PERF.md measures
# it), at most MAXCONN connections (none given: HAProxy's own default, from
# the descriptor limit), client and server timeouts of TIMEOUT, and MODE
# (e.g. tcp) for every section when given.
hap_head() {
  echo "global"
  echo "  nbthread 1"
  if [ -n "$1" ]; then echo "  maxconn $1"; fi
  echo "defaults"
  if [ -n "${3:-}" ]; then echo "  mode $3"; fi
  cat <<EOF
  timeout connect 5s
  timeout client $2
  timeout server $2
EOF
}

# ingress_cfg MAXCONN TIMEOUT LISTEN TENANT [BIND_OPTIONS]: on stdout, the
# config of the shared ingress, HAProxy in mode tcp as a cluster's ingress
# runs it: on LISTEN (with BIND_OPTIONS), it waits for the ClientHello and
# sends the SNI $API to tenant A's stand-in at TENANT (backend tenant_a).
# It ends inside its frontend, so that the caller may add routes and
# sections of its own.
ingress_cfg() {
  hap_head "$1" "$2" tcp
  cat <<EOF
backend tenant_a
  server a $4
frontend ingress
  bind $3${5:+ $5}
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend tenant_a if { req.ssl_sni -i $API }
EOF
}

# sidecar_cfg MAXCONN TIMEOUT LISTEN BIND_OPTIONS SERVER: on stdout, the
# config of an anchor, HAProxy with k0smotron's sidecar frontend and backend
# verbatim: on LISTEN with BIND_OPTIONS (for TLS, "ssl crt W/LEAF.pem"), to
# SERVER, its backend's server line (k0smotron's own: k0s_upstream).
sidecar_cfg() {
  hap_head "$1" "$2"
  cat <<EOF
frontend kubeapi_front
    bind $3 v4v6 $4
    mode tcp
    default_backend kubeapi_back
backend kubeapi_back
    mode tcp
    $5
EOF
}

# k0s_upstream INGRESS: k0smotron's server line, for sidecar_cfg: a new TLS
# connection to the shared ingress at INGRESS, verifying rig_pki's CA, with
# the SNI $API.
k0s_upstream() {
  echo "server kube_api $1 ssl verify required ca-file $W/ca.crt sni str($API)"
}

# pki COMMAND ARG...: hack/bench/pki.sh's ca or leaf, run in W; every file
# there is left readable by nginx's worker user.
pki() {
  (
    . hack/bench/pki.sh
    cd "$W" || exit 1
    "$@"
    chmod 644 ./*
  )
}

# rig_pki CA_CN PROXY_SANS [ECDSA_SANS]: the certificates every rig needs,
# in W: the cluster CA (common name CA_CN, RSA-2048 like a kubeadm one);
# tenant-a, tenant A's API certificate (RSA-2048 like a kube-apiserver's);
# k0s-rsa, k0smotron's RSA-2048 proxy leaf, and ecdsa, our ECDSA P-256 one,
# both for kubernetes.default.svc and PROXY_SANS (e.g. "IP:127.0.0.2"),
# ecdsa for ECDSA_SANS instead when given. A rig needing more adds them
# with `pki leaf`.
rig_pki() {
  pki ca "$1"
  pki leaf tenant-a rsa:2048 "" "DNS:$API"
  pki leaf k0s-rsa rsa:2048 "" "DNS:kubernetes.default.svc,$2"
  pki leaf ecdsa ec "-pkeyopt ec_paramgen_curve:P-256" "DNS:kubernetes.default.svc,${3:-$2}"
}

# wait_ok URL [CURL_ARGS...]: wait until URL answers with a success (curl
# -k: any certificate), 300 tries 0.1 s apart (30 s while nothing listens;
# each try at most 2 s, so that a process that accepts and then hangs
# cannot stall it); otherwise say so, show the last lines of the logs in W
# and fail (under set -e: the script stops).
wait_ok() {
  for _ in $(seq 1 300); do curl -ksf -o /dev/null --max-time 2 "$@" && return 0; sleep 0.1; done
  echo "error: $1 never answered" >&2
  tail -n 5 "$W"/*.log >&2 2>/dev/null || true
  return 1
}
