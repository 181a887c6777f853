# The set-up every benchmark rig shares (sourced by hack/bench-proxy.sh,
# hack/bench-proxy-pooled.sh and hack/load-proxy.sh, from the repository root).

# require TOOL...: stop with the packages to install when a tool is missing.
require() {
  local bin pkgs=()
  for bin in "$@"; do
    case "$bin" in ss) pkgs+=(iproute2) ;; *) pkgs+=("$bin") ;; esac
  done
  for bin in "$@"; do
    command -v "$bin" >/dev/null || { echo "error: $bin is required (apt-get install -y ${pkgs[*]})" >&2; exit 1; }
  done
}

# proxy_binary PROFILE: HCP_INGRESS as given, or the binary built with that cargo profile.
proxy_binary() {
  if [ -z "${HCP_INGRESS:-}" ]; then
    cargo build --profile "$1" --bin hcp-ingress >&2
    HCP_INGRESS="${CARGO_TARGET_DIR:-target}/$1/hcp-ingress"
  fi
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
