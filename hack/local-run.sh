#!/usr/bin/env bash
# The whole system on one machine, in one command (README command 1):
#
#   management cluster   memkube (in-memory API) + `hcp-ingress controller`
#   shared ingress       Debian's HAProxy, mode tcp, routing by SNI
#   tenants a and b      nginx TLS servers standing in for two API servers,
#                        each with its own cluster CA
#   workload clusters    one memkube each, reached through <cluster>-kubeconfig
#   nodes and pods       network namespaces; the node runs `hcp-ingress-proxy`
#                        with exactly the config and certificate the controller
#                        wrote into the workload cluster; an iptables DNAT sends
#                        10.96.0.1:443 to the proxy, as kube-proxy would
#
# It creates two ControlPlaneIngresses, shows a "pod" request to
# https://10.96.0.1 reaching the right tenant, the objects created and the
# status conditions, then stops everything and removes what it set up.
# Needs root (network namespaces, iptables), and the packages of
# hack/install-run-deps.sh (installed when missing: Debian packages only,
# none of the test suite's peers).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

[ "$(id -u)" -eq 0 ] || { echo "local-run: needs root (network namespaces, iptables)" >&2; exit 1; }
export PATH="$PATH:/usr/sbin:/sbin"
for tool in haproxy nginx iptables ip curl openssl; do
  command -v "$tool" >/dev/null || { bash hack/install-run-deps.sh >/dev/null; break; }
done

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "building hcp-ingress and memkube"
cargo build -q --bin hcp-ingress --bin hcp-ingress-proxy -p hcp-ingress
cargo build -q --bin memkube -p memkube
BIN=$ROOT/target/debug

WORK=$(mktemp -d /tmp/hcp-ingress-local.XXXXXX)
PIDS=()
INGRESS_IP=10.200.0.1
TENANTS=(a b)

cleanup() {
  local status=$?
  set +e
  if [ "$status" -ne 0 ]; then
    for log in "$WORK"/controller.log "$WORK"/node-*/proxy.log "$WORK"/nginx.log; do
      [ -s "$log" ] && { echo "--- last lines of $log"; tail -n 15 "$log"; }
    done
  fi
  say "stopping"
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
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

say "tenant API servers (nginx) and the shared ingress (HAProxy on $INGRESS_IP:443)"
ip addr add "$INGRESS_IP/32" dev lo
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.log warn;
events { worker_connections 256; }
http {
  access_log off;
  server { listen 127.0.0.1:16443 ssl; ssl_certificate $WORK/tenant-a/apiserver.crt; ssl_certificate_key $WORK/tenant-a/apiserver.key;
           location / { default_type application/json; return 200 '{"tenant":"a","message":"hello from the API server of tenant A"}\n'; } }
  server { listen 127.0.0.1:26443 ssl; ssl_certificate $WORK/tenant-b/apiserver.crt; ssl_certificate_key $WORK/tenant-b/apiserver.key;
           location / { default_type application/json; return 200 '{"tenant":"b","message":"hello from the API server of tenant B"}\n'; } }
}
EOF
nginx -c "$WORK/nginx.conf" -g 'daemon off;' &
PIDS+=($!)
cat >"$WORK/haproxy.cfg" <<EOF
global
  log stderr format short local0 warning
defaults
  mode tcp
  timeout connect 5s
  timeout client 1m
  timeout server 1m
frontend shared_ingress
  bind $INGRESS_IP:443
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend tenant_a if { req.ssl_sni -i api.tenant-a.example.com }
  use_backend tenant_b if { req.ssl_sni -i api.tenant-b.example.com }
backend tenant_a
  server a 127.0.0.1:16443
backend tenant_b
  server b 127.0.0.1:26443
EOF
haproxy -f "$WORK/haproxy.cfg" -db &
PIDS+=($!)

say "in-memory API servers: one management cluster, one workload cluster per tenant"
crds=(--crds "$WORK/crd.yaml")
"$BIN/hcp-ingress" crd >"$WORK/crd.yaml"
[ -d ../shared/schemas ] && crds+=(--crds ../shared/schemas)
"$BIN/memkube" --listen 127.0.0.1:0 --kubeconfig "$WORK/mgmt.kubeconfig" --name management "${crds[@]}" >"$WORK/mgmt.url" &
PIDS+=($!)
for t in "${TENANTS[@]}"; do
  "$BIN/memkube" --listen 127.0.0.1:0 --kubeconfig "$WORK/tenant-$t.kubeconfig" --name "tenant-$t" >"$WORK/tenant-$t.url" &
  PIDS+=($!)
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
for t in "${TENANTS[@]}"; do
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
done

say "the controller"
KUBECONFIG=$WORK/mgmt.kubeconfig "$BIN/hcp-ingress" controller \
  --health-addr 127.0.0.1:19440 --metrics-addr 127.0.0.1:18080 --resync-seconds 5 \
  --proxy-image "hcp-ingress:local" >"$WORK/controller.log" 2>&1 &
PIDS+=($!)
wait_for "controller readiness" curl -sf http://127.0.0.1:19440/readyz

say "two ControlPlaneIngresses"
for t in "${TENANTS[@]}"; do
  cat <<EOF
apiVersion: hcp-ingress.dev/v1alpha1
kind: ControlPlaneIngress
metadata: {name: tenant-$t, namespace: tenants}
spec:
  clusterName: tenant-$t
  ingress: {apiHost: api.tenant-$t.example.com, className: haproxy, port: 443}
  backend: {serviceName: kmc-tenant-$t, apiPort: 30443}
  proxy: {upstreams: ["$INGRESS_IP"]}
---
EOF
done | tee "$WORK/cpis.yaml"
mk apply --server-side -f "$WORK/cpis.yaml"

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
  PIDS+=($!)
  wait_for "the tenant-$t node proxy" ip netns exec "$node" curl -sf http://127.0.0.1:9445/readyz
  # The DaemonSet controller's part: report the ready pod.
  wk "$t" -n kube-system patch daemonset hcp-ingress-proxy --subresource=status --type=merge \
    -p '{"status":{"desiredNumberScheduled":1,"currentNumberScheduled":1,"numberReady":1,"numberMisscheduled":0}}' >/dev/null
done

say "a pod in each workload cluster calls https://10.96.0.1 (no SNI), verifying its cluster CA"
for t in "${TENANTS[@]}"; do
  echo "pod in tenant-$t: curl --cacert tenant-$t-ca.crt https://10.96.0.1/"
  ip netns exec "hcpi-pod-$t" curl -sS --max-time 10 --cacert "$WORK/tenant-$t/ca.crt" https://10.96.0.1/
  echo "pod in tenant-$t: curl https://kubernetes.default.svc/ (SNI kubernetes.default.svc)"
  ip netns exec "hcpi-pod-$t" curl -sS --max-time 10 --cacert "$WORK/tenant-$t/ca.crt" \
    --resolve kubernetes.default.svc:443:10.96.0.1 https://kubernetes.default.svc/
done

say "objects in the management cluster"
mk get controlplaneingresses -A
mk -n tenants get ingresses -o custom-columns='NAME:.metadata.name,CLASS:.spec.ingressClassName,HOST:.spec.rules[*].host,PASSTHROUGH:.metadata.annotations.haproxy\.org/ssl-passthrough'

say "objects in workload cluster tenant-a"
wk a -n kube-system get configmaps,secrets,daemonsets -l app.kubernetes.io/managed-by=hcp-ingress
wk a -n default get endpoints kubernetes -o custom-columns='NAME:.metadata.name,ADDRESS:.subsets[*].addresses[*].ip,PORT:.subsets[*].ports[*].port'

say "status conditions"
for t in "${TENANTS[@]}"; do
  wait_for "tenant-$t Ready" sh -c "kubectl --kubeconfig '$WORK/mgmt.kubeconfig' -n tenants get cpi tenant-$t -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" || true
  echo "tenant-$t:"
  mk -n tenants get cpi "tenant-$t" \
    -o jsonpath='{range .status.conditions[*]}{"  "}{.type}{"="}{.status}{"  "}{.reason}{": "}{.message}{"\n"}{end}'
done
