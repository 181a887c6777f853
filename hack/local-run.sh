#!/usr/bin/env bash
# The whole system on one machine, in one command (README command 1):
#
#   management cluster   memkube (in-memory API) + `hcp-ingress controller`
#   shared ingress       haproxy-ingress (jcmoraisjr, hack/consumers/versions.env)
#                        running Debian's HAProxy 2.6: it watches the management
#                        API and passes TLS through by SNI as the Ingresses the
#                        controller wrote say; nothing here writes its config
#   tenants a and b      nginx TLS servers standing in for two API servers,
#                        each with its own cluster CA, behind a Service and
#                        EndpointSlice in the management cluster (what the
#                        control plane's provider makes)
#   workload clusters    one memkube each, reached through <cluster>-kubeconfig
#   nodes and pods       network namespaces; the node runs `hcp-ingress-proxy`
#                        with exactly the config and certificate the controller
#                        wrote into the workload cluster; an iptables DNAT sends
#                        10.96.0.1:443 to the proxy, as kube-proxy would
#
# It creates two ControlPlaneIngresses, shows the routes haproxy-ingress
# generated from the controller's Ingresses, a "pod" request to
# https://10.96.0.1 reaching the right tenant, the objects created and the
# status conditions, then stops everything and removes what it set up.
# Needs root (network namespaces, iptables), the packages of
# hack/install-run-deps.sh (installed when missing: Debian packages only,
# none of the test suite's peers), and, the first time, Go (>= 1.25; looked
# for in /usr/local/go/bin too) to build haproxy-ingress with
# hack/consumers/build.sh into ${HCP_CONSUMERS_CACHE:-~/.cache/hcp-ingress/consumers}
# (in the background, while cargo builds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

[ "$(id -u)" -eq 0 ] || { echo "local-run: needs root (network namespaces, iptables)" >&2; exit 1; }
export PATH="$PATH:/usr/sbin:/sbin"
for tool in haproxy nginx iptables ip curl openssl; do
  command -v "$tool" >/dev/null || { bash hack/install-run-deps.sh >/dev/null; break; }
done
# haproxy-ingress's Lua scripts load Debian's lua-json (`require "json"`).
[ -s /usr/share/lua/5.3/json.lua ] || bash hack/install-run-deps.sh >/dev/null
# Where Go's release tarball puts it, when it is not on PATH.
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# No dot in the path: haproxy-ingress names its map files by replacing the
# first "." of the whole path (maps/_front_http_host.map becomes
# ..._host__prefix.map), which a dot in a folder name breaks.
WORK=$(mktemp -d /tmp/hcp-ingress-local-XXXXXX)
# What this script started, as "pid:start" words (see started_at).
PIDS=()
BUILD=
INGRESS_IP=10.200.0.1
TENANTS=(a b)
# The port of each tenant's stand-in API server (nginx, on loopback), as
# TENANTS orders them.
TENANT_PORTS=(16443 26443)

# A process's start time (in clock ticks since boot): with its pid, it
# names the process and not a later one that got the same pid.
started_at() {
  local stat
  stat=$(cat /proc/"$1"/stat 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086 # the fields after the command name, one a word
  set -- $stat
  echo "${20}"
}

# Every process below `pid`, as "pid:start" words. Read before `pid` is
# stopped: its orphans are re-parented and no longer found from it.
# haproxy-ingress starts haproxy in a process group of its own, and go
# build its compilers: a signal to the parent reaches neither.
descendants() {
  local child
  # shellcheck disable=SC2013 # the file holds pids separated by spaces
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$child:$(started_at "$child")"
    descendants "$child"
  done
}

# Whether "pid:start" is still that process.
alive() {
  local start
  start=$(started_at "${1%%:*}") && [ "$start" = "${1#*:}" ]
}

# "pid:start" of a process just started.
tracked() { echo "$1:$(started_at "$1")"; }

cleanup() {
  local status=$?
  set +e
  if [ "$status" -ne 0 ]; then
    for log in "$WORK"/consumers-build.log "$WORK"/haproxy-ingress.log "$WORK"/controller.log \
      "$WORK"/node-*/proxy.log "$WORK"/nginx.log; do
      [ -s "$log" ] && { echo "--- last lines of $log"; tail -n 15 "$log"; }
    done
  fi
  say "stopping"
  local below="" pid left
  for pid in $BUILD "${PIDS[@]}"; do
    alive "$pid" || continue
    below+=" $(descendants "${pid%%:*}")"
    kill "${pid%%:*}" 2>/dev/null
  done
  for pid in $below; do alive "$pid" && kill "${pid%%:*}" 2>/dev/null; done
  wait 2>/dev/null
  # Not our children, so not waited for above: a few seconds to exit, then
  # the end.
  for _ in $(seq 1 50); do
    left=""
    for pid in $below; do alive "$pid" && left+=" $pid"; done
    below=$left
    [ -z "$below" ] && break
    sleep 0.1
  done
  for pid in $below; do alive "$pid" && kill -KILL "${pid%%:*}" 2>/dev/null; done
  for t in "${TENANTS[@]}"; do
    ip netns del "hcpi-node-$t" 2>/dev/null
    ip netns del "hcpi-pod-$t" 2>/dev/null
  done
  ip addr del "$INGRESS_IP/32" dev lo 2>/dev/null
  rm -rf "$WORK"
  echo "stopped; network namespaces and addresses removed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "local-run: timed out waiting for $what" >&2
  return 1
}

# haproxy-ingress builds (Go: 0.3 GB of modules and about 2.5 minutes of
# CPU the first time) while cargo does; it is waited for just before the
# ingress starts. A second run finds it built and returns at once.
HI_BIN=$(bash hack/consumers/build.sh --print-bin-dir haproxy-ingress)
HI_VERSION=$(basename "$(dirname "$HI_BIN")")
HI_VERSION=${HI_VERSION#haproxy-ingress-}
if [ ! -x "$HI_BIN/haproxy-ingress-controller" ]; then
  command -v go >/dev/null || {
    echo "local-run: Go (>= 1.25, https://go.dev/dl) is needed once, to build haproxy-ingress $HI_VERSION" >&2
    exit 1
  }
  say "building haproxy-ingress $HI_VERSION from the Go module proxy, in the background (first run only)"
fi
bash hack/consumers/build.sh haproxy-ingress >/dev/null 2>"$WORK/consumers-build.log" &
BUILD=$(tracked $!)

say "building hcp-ingress and memkube"
cargo build -q -p hcp-ingress -p hcp-ingress-proxy -p memkube --bin hcp-ingress --bin hcp-ingress-proxy --bin memkube
TARGET=${CARGO_TARGET_DIR:-target}
[[ $TARGET == /* ]] || TARGET=$ROOT/$TARGET
BIN=$TARGET/debug

say "certificates: one cluster CA per tenant, an API server certificate for each"
for t in "${TENANTS[@]}"; do
  d=$WORK/tenant-$t
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=tenant-$t-ca" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=kube-apiserver" -keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=DNS:api.tenant-%s.example.com\nextendedKeyUsage=serverAuth\n' "$t" >"$d/ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/ext" -out "$d/apiserver.crt" 2>/dev/null
done

say "tenant API servers (nginx on 127.0.0.1:${TENANT_PORTS[0]} and :${TENANT_PORTS[1]})"
ip addr add "$INGRESS_IP/32" dev lo
{
  cat <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.log warn;
events { worker_connections 256; }
http {
  access_log off;
EOF
  for i in "${!TENANTS[@]}"; do
    t=${TENANTS[$i]}
    cat <<EOF
  server { listen 127.0.0.1:${TENANT_PORTS[$i]} ssl; ssl_certificate $WORK/tenant-$t/apiserver.crt; ssl_certificate_key $WORK/tenant-$t/apiserver.key;
           location / { default_type application/json; return 200 '{"tenant":"$t","message":"hello from the API server of tenant ${t^^}"}\n'; } }
EOF
  done
  echo "}"
} >"$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf" -g 'daemon off;' &
PIDS+=("$(tracked $!)")

say "in-memory API servers: one management cluster, one workload cluster per tenant"
crds=(--crds "$WORK/crd.yaml")
"$BIN/hcp-ingress" crd >"$WORK/crd.yaml"
[ -d ../shared/schemas ] && crds+=(--crds ../shared/schemas)
"$BIN/memkube" --listen 127.0.0.1:0 --kubeconfig "$WORK/mgmt.kubeconfig" --name management "${crds[@]}" >"$WORK/mgmt.url" &
PIDS+=("$(tracked $!)")
for t in "${TENANTS[@]}"; do
  "$BIN/memkube" --listen 127.0.0.1:0 --kubeconfig "$WORK/tenant-$t.kubeconfig" --name "tenant-$t" >"$WORK/tenant-$t.url" &
  PIDS+=("$(tracked $!)")
done
for f in mgmt tenant-a tenant-b; do wait_for "$f API" test -s "$WORK/$f.kubeconfig"; done
mk() { kubectl --kubeconfig "$WORK/mgmt.kubeconfig" "$@"; }
wk() { local t=$1; shift; kubectl --kubeconfig "$WORK/tenant-$t.kubeconfig" "$@"; }
wait_for "management API" mk get namespaces

mk apply --server-side -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: tenants}
EOF
for i in "${!TENANTS[@]}"; do
  t=${TENANTS[$i]}
  # What the API server and CAPI leave in a fresh workload cluster.
  wk "$t" apply --server-side -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: kube-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Service
metadata: {name: kubernetes, namespace: default}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: https, port: 443, targetPort: 6443, protocol: TCP}]
EOF
  # What CAPI keeps in the management cluster for each workload cluster.
  if mk get crd clusters.cluster.x-k8s.io >/dev/null 2>&1; then
    mk apply --server-side -f - >/dev/null <<EOF
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: tenant-$t, namespace: tenants}
spec: {paused: false}
EOF
    mk -n tenants patch cluster "tenant-$t" --subresource=status --type=merge \
      -p '{"status":{"initialization":{"controlPlaneInitialized":true}}}' >/dev/null
  fi
  mk -n tenants create secret generic "tenant-$t-kubeconfig" --from-file=value="$WORK/tenant-$t.kubeconfig" \
    --dry-run=client -o yaml | mk apply --server-side -f - >/dev/null
  mk -n tenants create secret tls "tenant-$t-ca" --cert="$WORK/tenant-$t/ca.crt" --key="$WORK/tenant-$t/ca.key" \
    --dry-run=client -o yaml | mk apply --server-side -f - >/dev/null
  # What the control plane's provider makes in the management cluster: the
  # Service the route names (spec.backend: serviceName, apiPort) and its
  # endpoints, here the tenant's nginx. No endpoint controller runs, so
  # the EndpointSlice is written as it would; haproxy-ingress reads
  # EndpointSlices (its --enable-endpointslices-api defaults to true), and
  # memkube, unlike kube-apiserver, takes a loopback address.
  mk apply --server-side -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kmc-tenant-$t, namespace: tenants}
spec:
  ports: [{name: api, port: 30443, targetPort: ${TENANT_PORTS[$i]}, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kmc-tenant-$t-api
  namespace: tenants
  labels: {kubernetes.io/service-name: kmc-tenant-$t, endpointslice.kubernetes.io/managed-by: local-run}
addressType: IPv4
endpoints: [{addresses: [127.0.0.1], conditions: {ready: true, serving: true, terminating: false}}]
ports: [{name: api, port: ${TENANT_PORTS[$i]}, protocol: TCP}]
EOF
done

say "the shared ingress: haproxy-ingress $HI_VERSION running $(haproxy -v | head -n 1 | cut -d' ' -f1-3), on $INGRESS_IP:443"
# Its class (as the Ingresses name it), and its global config: every
# listener on the ingress address (the defaults are 80, 443, 1936 and 10253
# on every address).
mk apply --server-side -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: haproxy-ingress}
spec: {controller: haproxy-ingress.github.io/controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: ingress}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: haproxy-ingress, namespace: ingress}
data:
  bind-https: "$INGRESS_IP:443"
  bind-http: "$INGRESS_IP:80"
  bind-ip-addr-tcp: "$INGRESS_IP"
  bind-ip-addr-healthz: "$INGRESS_IP"
  bind-ip-addr-stats: "$INGRESS_IP"
EOF
if ! wait "${BUILD%%:*}"; then
  BUILD=
  echo "local-run: hack/consumers/build.sh haproxy-ingress failed" >&2
  exit 1
fi
BUILD=
# The image's start script copies the Lua files next to the config; the
# templates are read from rootfs/etc/templates relative to the working
# directory. Status updates and Gateway API need an in-cluster run
# (POD_NAMESPACE, leader election); the Ingress path is what is shown.
HI_FS=$WORK/haproxy-ingress
mkdir -p "$HI_FS/etc/haproxy/lua"
cp "$HI_BIN"/rootfs/etc/lua/*.lua "$HI_FS/etc/haproxy/lua/"
(
  cd "$HI_BIN"
  exec ./haproxy-ingress-controller --kubeconfig="$WORK/mgmt.kubeconfig" \
    --local-filesystem-prefix="$HI_FS" --master-worker \
    --configmap=ingress/haproxy-ingress --ingress-class=haproxy-ingress \
    --healthz-port=0 --healthz-addr="$INGRESS_IP:10254" \
    --update-status=false --watch-gateway=false --v=2
) >"$WORK/haproxy-ingress.log" 2>&1 &
HI_PID=$!
PIDS+=("$(tracked "$HI_PID")")
wait_for "haproxy-ingress to start HAProxy" grep -q "haproxy successfully reloaded" "$WORK/haproxy-ingress.log"
# HAProxy's master (and worker), in a process group of their own: stopped
# by the cleanup even if haproxy-ingress is gone by then.
read -ra haproxy_pids <<<"$(descendants "$HI_PID" | tr '\n' ' ')"
PIDS+=("${haproxy_pids[@]}")
echo "haproxy-ingress watches the management API; it wrote and loaded $HI_FS/etc/haproxy/haproxy.cfg"

say "the controller"
KUBECONFIG=$WORK/mgmt.kubeconfig "$BIN/hcp-ingress" controller \
  --health-addr 127.0.0.1:19440 --metrics-addr 127.0.0.1:18080 --resync-seconds 5 --retry-seconds 2 \
  --proxy-image "hcp-ingress:local" >"$WORK/controller.log" 2>&1 &
PIDS+=("$(tracked $!)")
wait_for "controller readiness" curl -sf http://127.0.0.1:19440/readyz

say "two ControlPlaneIngresses"
for t in "${TENANTS[@]}"; do
  cat <<EOF
apiVersion: hcp-ingress.dev/v1alpha1
kind: ControlPlaneIngress
metadata: {name: tenant-$t, namespace: tenants}
spec:
  clusterName: tenant-$t
  ingress: {apiHost: api.tenant-$t.example.com, className: haproxy-ingress, port: 443}
  route: {controller: haproxy-ingress}
  backend: {serviceName: kmc-tenant-$t, apiPort: 30443}
  proxy: {upstreams: ["$INGRESS_IP"]}
---
EOF
done | tee "$WORK/cpis.yaml"
mk apply --server-side -f "$WORK/cpis.yaml"

say "the routes haproxy-ingress generated from the controller's Ingresses"
for t in "${TENANTS[@]}"; do
  # Until it has read the Ingress and reloaded HAProxy: it watches the API
  # and reloads on its own schedule.
  wait_for "haproxy-ingress to route api.tenant-$t.example.com" \
    curl -sf --max-time 2 --cacert "$WORK/tenant-$t/ca.crt" \
    --resolve "api.tenant-$t.example.com:443:$INGRESS_IP" "https://api.tenant-$t.example.com/"
done
echo "frontend (etc/haproxy/haproxy.cfg):"
grep -E "^ *bind $INGRESS_IP:443|req.ssl_sni" "$HI_FS/etc/haproxy/haproxy.cfg" | sed 's/^ */  /'
echo "SNI passthrough map (etc/haproxy/maps/_front_sslpassthrough__exact.map, SNI -> backend):"
grep -v '^#' "$HI_FS/etc/haproxy/maps/_front_sslpassthrough__exact.map" | sed 's/^/  /'
echo "backends (etc/haproxy/haproxy.cfg, the Service's EndpointSlice):"
awk '/^backend /{on = ($2 ~ /^tenants_/)} on && (/^backend / || (/^ *server / && !/ disabled /))' \
  "$HI_FS/etc/haproxy/haproxy.cfg" | sed 's/^ */  /; /^  server/s/^/  /'

say "each tenant's node: the proxy runs the config and certificate the controller wrote"
for i in "${!TENANTS[@]}"; do
  t=${TENANTS[$i]}; n=$((i + 1)); node=hcpi-node-$t; pod=hcpi-pod-$t; d=$WORK/node-$t
  mkdir -p "$d"
  wait_for "the proxy Secret in tenant-$t" wk "$t" -n kube-system get secret hcp-ingress-proxy
  wk "$t" -n kube-system get configmap hcp-ingress-proxy -o jsonpath='{.data.config\.yaml}' >"$d/config.yaml"
  wk "$t" -n kube-system get configmap hcp-ingress-proxy -o jsonpath='{.data.ca\.crt}' >"$d/ca.crt"
  wk "$t" -n kube-system get secret hcp-ingress-proxy -o jsonpath='{.data.tls\.crt}' | base64 -d >"$d/tls.crt"
  wk "$t" -n kube-system get secret hcp-ingress-proxy -o jsonpath='{.data.tls\.key}' | base64 -d >"$d/tls.key"
  chmod 0400 "$d/tls.key"
  # The DaemonSet mounts these under /etc/hcp-ingress; here they live in $d.
  sed -i "s#/etc/hcp-ingress/config/#$d/#g; s#/etc/hcp-ingress/tls/#$d/#g" "$d/config.yaml"

  ip netns add "$node"; ip netns add "$pod"
  ip link add "hcpi-$t-h" type veth peer name "hcpi-$t-n"
  ip link set "hcpi-$t-n" netns "$node"
  ip addr add "10.200.$n.1/30" dev "hcpi-$t-h"; ip link set "hcpi-$t-h" up
  ip -n "$node" addr add "10.200.$n.2/30" dev "hcpi-$t-n"; ip -n "$node" link set "hcpi-$t-n" up
  ip -n "$node" link set lo up
  ip -n "$node" route add default via "10.200.$n.1"
  ip link add "hcpi-$t-p" type veth peer name "hcpi-$t-q"
  ip link set "hcpi-$t-p" netns "$node"; ip link set "hcpi-$t-q" netns "$pod"
  ip -n "$node" addr add "10.201.$n.1/30" dev "hcpi-$t-p"; ip -n "$node" link set "hcpi-$t-p" up
  ip -n "$pod" addr add "10.201.$n.2/30" dev "hcpi-$t-q"; ip -n "$pod" link set "hcpi-$t-q" up
  ip -n "$pod" link set lo up
  ip -n "$pod" route add default via "10.201.$n.1"
  ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1
  # kube-proxy's part: the Service IP goes to the endpoint the controller wrote (the advertise address).
  ip netns exec "$node" iptables -t nat -A PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 240.0.0.1:443
  ip netns exec "$node" "$BIN/hcp-ingress-proxy" --config "$d/config.yaml" --log-format text >"$d/proxy.log" 2>&1 &
  PIDS+=("$(tracked $!)")
  wait_for "the tenant-$t node proxy" ip netns exec "$node" curl -sf http://127.0.0.1:9445/readyz
  # The DaemonSet controller's part: report the ready pod.
  wk "$t" -n kube-system patch daemonset hcp-ingress-proxy --subresource=status --type=merge \
    -p '{"status":{"desiredNumberScheduled":1,"currentNumberScheduled":1,"numberReady":1,"numberMisscheduled":0}}' >/dev/null
done

say "a pod in each workload cluster calls https://10.96.0.1 (no SNI), verifying its cluster CA"
echo "(pod -> node proxy, which adds SNI api.tenant-<t>.example.com -> haproxy-ingress's HAProxy on $INGRESS_IP:443 -> the tenant's API server)"
for t in "${TENANTS[@]}"; do
  echo "pod in tenant-$t: curl --cacert tenant-$t-ca.crt https://10.96.0.1/"
  ip netns exec "hcpi-pod-$t" curl -sS --max-time 10 --cacert "$WORK/tenant-$t/ca.crt" https://10.96.0.1/
  echo "pod in tenant-$t: curl https://kubernetes.default.svc/ (SNI kubernetes.default.svc)"
  ip netns exec "hcpi-pod-$t" curl -sS --max-time 10 --cacert "$WORK/tenant-$t/ca.crt" \
    --resolve kubernetes.default.svc:443:10.96.0.1 https://kubernetes.default.svc/
done

say "waiting for both ControlPlaneIngresses to be Ready"
# The controller probes the path through the ingress as soon as it wrote the
# route, which may be before haproxy-ingress loaded it (its default
# certificate answers: CertificateMismatch); a ControlPlaneIngress that is
# not Ready is checked again 30 s later.
for t in "${TENANTS[@]}"; do
  wait_for "tenant-$t Ready" sh -c "kubectl --kubeconfig '$WORK/mgmt.kubeconfig' -n tenants get cpi tenant-$t -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" || true
done

say "objects in the management cluster"
mk get controlplaneingresses -A
mk -n tenants get ingresses -o custom-columns='NAME:.metadata.name,CLASS:.spec.ingressClassName,HOST:.spec.rules[*].host,SERVICE:.spec.rules[*].http.paths[*].backend.service.name,PORT:.spec.rules[*].http.paths[*].backend.service.port.number,PASSTHROUGH:.metadata.annotations.haproxy-ingress\.github\.io/ssl-passthrough'

say "objects in workload cluster tenant-a"
wk a -n kube-system get configmaps,secrets,daemonsets -l app.kubernetes.io/managed-by=hcp-ingress
wk a -n default get endpoints kubernetes -o custom-columns='NAME:.metadata.name,ADDRESS:.subsets[*].addresses[*].ip,PORT:.subsets[*].ports[*].port'

say "status conditions"
for t in "${TENANTS[@]}"; do
  echo "tenant-$t:"
  mk -n tenants get cpi "tenant-$t" \
    -o jsonpath='{range .status.conditions[*]}{"  "}{.type}{"="}{.status}{"  "}{.reason}{": "}{.message}{"\n"}{end}'
done
