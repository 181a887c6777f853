#!/usr/bin/env bash
# End-to-end check on a real kind management cluster, for users with Docker
# (documented in docs/kind-e2e.md; CI cannot run it: no Docker engine there).
#
# 1. kind management cluster, HAProxy ingress with SSL passthrough on :443
# 2. Cluster API + k0smotron + CAPD (docker) via clusterctl
# 3. hcp-ingress image built locally, loaded into kind, installed from
#    out/addon-components.yaml the way clusterctl does
# 4. a k0smotron hosted-control-plane cluster with one docker worker, its
#    `spec.ingress` on the shared ingress
# 5. checks: ControlPlaneIngress Ready, the API by host name from outside, and
#    kubernetes.default.svc from a pod inside (through the node proxy)
#
# Needs: docker, kind, kubectl, clusterctl, helm; internet access (images,
# charts, nip.io for host names). Variables:
#   CLUSTER=hcp-ingress-e2e   kind cluster name
#   K0S_VERSION=v1.33.4+k0s.0 tenant Kubernetes (k0s) version
#   KEEP=1                    keep the clusters at the end
#   SKIP_BUILD=1              use an already loaded IMAGE
#   IMAGE=hcp-ingress:e2e     image tag for the local build
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${CLUSTER:-hcp-ingress-e2e}"
K0S_VERSION="${K0S_VERSION:-v1.33.4+k0s.0}"
IMAGE="${IMAGE:-hcp-ingress:e2e}"
NS=tenants
TENANT=tenant-01
work="$(mktemp -d)"

log() { printf '\n==> %s\n' "$*" >&2; }
die() { echo "kind-e2e: $*" >&2; exit 1; }

for tool in docker kind kubectl clusterctl helm; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
docker info >/dev/null 2>&1 || die "no Docker engine is reachable"

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "kind-e2e: FAILED; state of the management cluster:" >&2
    kubectl get cpi -A -o wide >&2 || true
    kubectl -n hcp-ingress-system logs deploy/hcp-ingress-controller-manager --tail=100 >&2 || true
  fi
  if [ "${KEEP:-0}" != 1 ]; then
    kubectl -n "$NS" delete cluster "$TENANT" --wait=true --timeout=5m >/dev/null 2>&1 || true
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

log "kind management cluster $CLUSTER (port 443 of the node on the host)"
cat >"$work/kind.yaml" <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraMounts:
      - hostPath: /var/run/docker.sock      # CAPD creates the worker containers
        containerPath: /var/run/docker.sock
    extraPortMappings:
      - containerPort: 443
        hostPort: 443
        protocol: TCP
YAML
kind create cluster --name "$CLUSTER" --config "$work/kind.yaml" --wait 120s
kubectl config use-context "kind-$CLUSTER"
node_ip="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$CLUSTER-control-plane")"
DOMAIN="${DOMAIN:-${node_ip//./-}.nip.io}"
API_HOST="api.$TENANT.$DOMAIN"
KONN_HOST="konnectivity.$TENANT.$DOMAIN"
echo "ingress address $node_ip, tenant host $API_HOST" >&2

log "HAProxy Kubernetes Ingress (host port 443, SSL passthrough by annotation)"
helm repo add haproxytech https://haproxytech.github.io/helm-charts >/dev/null
helm repo update haproxytech >/dev/null
helm upgrade --install haproxy haproxytech/kubernetes-ingress \
  --namespace haproxy-controller --create-namespace \
  --set controller.kind=DaemonSet \
  --set controller.daemonset.useHostPort=true \
  --set controller.ingressClass=haproxy \
  --set controller.ingressClassResource.name=haproxy \
  --wait --timeout 5m

log "Cluster API, k0smotron and the docker infrastructure provider"
export CLUSTER_TOPOLOGY=true
clusterctl init --wait-providers \
  --infrastructure docker \
  --control-plane k0sproject-k0smotron \
  --bootstrap k0sproject-k0smotron

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "hcp-ingress image $IMAGE"
  IMAGE="${IMAGE%:*}" TAG="${IMAGE##*:}" bash hack/build-image.sh
fi
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "hcp-ingress from out/addon-components.yaml"
OUT="$work/out" bash hack/release-manifests.sh
HCP_INGRESS_IMAGE="$IMAGE" HCP_INGRESS_LOG_LEVEL=debug \
  clusterctl generate yaml --from "$work/out/addon-components.yaml" | kubectl apply --server-side -f -
kubectl -n hcp-ingress-system rollout status deploy/hcp-ingress-controller-manager --timeout=3m

log "tenant $NS/$TENANT: k0smotron control plane behind the shared ingress, one docker worker"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -n "$NS" -f - <<YAML
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: $TENANT
spec:
  clusterNetwork:
    pods: {cidrBlocks: [192.168.0.0/16]}
    services: {cidrBlocks: [10.128.0.0/12]}
    serviceDomain: cluster.local
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: K0smotronControlPlane
    name: $TENANT-cp
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: DockerCluster
    name: $TENANT
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: K0smotronControlPlane
metadata:
  name: $TENANT-cp
spec:
  version: $K0S_VERSION
  persistence: {type: emptyDir}
  service: {type: ClusterIP, apiPort: 6443, konnectivityPort: 8132}
  ingress:
    apiHost: $API_HOST
    konnectivityHost: $KONN_HOST
    className: haproxy
    port: 443
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: DockerCluster
metadata:
  name: $TENANT
  annotations:
    cluster.x-k8s.io/managed-by: k0smotron
spec: {}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: $TENANT-md
spec:
  clusterName: $TENANT
  replicas: 1
  selector:
    matchLabels: {cluster.x-k8s.io/cluster-name: $TENANT}
  template:
    metadata:
      labels: {cluster.x-k8s.io/cluster-name: $TENANT}
    spec:
      clusterName: $TENANT
      version: ${K0S_VERSION%%+*}
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: K0sWorkerConfigTemplate
          name: $TENANT-md
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: DockerMachineTemplate
        name: $TENANT-md
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: K0sWorkerConfigTemplate
metadata:
  name: $TENANT-md
spec:
  template:
    spec:
      version: $K0S_VERSION
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: DockerMachineTemplate
metadata:
  name: $TENANT-md
spec:
  template:
    spec: {}
YAML

log "waiting for the ControlPlaneIngress to be Ready"
for _ in $(seq 1 60); do
  kubectl -n "$NS" get cpi "$TENANT-cp" >/dev/null 2>&1 && break
  sleep 5
done
kubectl -n "$NS" wait cpi "$TENANT-cp" --for=condition=Ready --timeout=20m
kubectl -n "$NS" get cpi "$TENANT-cp" -o wide

log "check 1: the tenant API by host name, through the shared ingress"
kubectl -n "$NS" get secret "$TENANT-kubeconfig" -o jsonpath='{.data.value}' | base64 -d >"$work/tenant.kubeconfig"
grep -q "server: https://$API_HOST" "$work/tenant.kubeconfig" || die "kubeconfig does not use $API_HOST"
tk() { kubectl --kubeconfig "$work/tenant.kubeconfig" "$@"; }
tk get --raw /readyz >/dev/null
tk get nodes -o wide

log "check 2: default/kubernetes steered to the node proxy"
tk -n kube-system rollout status ds/hcp-ingress-proxy --timeout=5m
tk -n default get endpointslices -l kubernetes.io/service-name=kubernetes -o wide

log "check 3: kubernetes.default.svc from a pod (no SNI on the wire)"
tk -n default delete pod hcp-ingress-probe --ignore-not-found >/dev/null
tk -n default run hcp-ingress-probe --image=curlimages/curl:8.10.1 --restart=Never --command -- \
  sh -c 'curl -fsS --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt \
    -H "Authorization: Bearer $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)" \
    https://kubernetes.default.svc/version'
tk -n default wait pod hcp-ingress-probe --for=jsonpath='{.status.phase}'=Succeeded --timeout=5m
tk -n default logs hcp-ingress-probe

echo "kind-e2e: PASS" >&2
