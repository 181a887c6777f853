# The set-up every benchmark rig shares (sourced by hack/bench-proxy.sh,
# hack/bench-proxy-pooled.sh and hack/load-proxy.sh, from the repository root).

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
      cargo build --profile "$1" --target "$TARGET" --bin hcp-ingress-proxy >&2
      HCP_INGRESS="${CARGO_TARGET_DIR:-target}/$TARGET/$1/hcp-ingress-proxy"
    else
      cargo build --profile "$1" --bin hcp-ingress-proxy >&2
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
