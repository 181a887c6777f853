//! The node proxy: its config, certificate Secret, DaemonSet and steering objects.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Endpoints, Secret},
    discovery::v1::EndpointSlice,
};
use kube::api::DynamicObject;
use md5::{Digest, Md5};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::shared::{
    ENDPOINT_SLICE_MANAGER, NAME, ProxyTls, SKIP_MIRROR_LABEL, WorkloadError, WorkloadInputs,
    advertise_address, bytes, own_labels, proxy_namespace, proxy_spec, selector_labels, typed,
};
use crate::{
    api::{ControlPlaneIngress, ProxyMode, ProxySpec, Steering},
    proxy::config::{
        LogFormatKey, Mode, RESTART_ONLY_KEYS, RawAdmin, RawConfig, RawListen, RawLog, RawTimeouts,
        RawTls, RawUpstream,
    },
};

/// Where the ConfigMap is mounted (`config.yaml`, `ca.crt`).
pub const CONFIG_DIR: &str = "/etc/hcp-ingress/config";
/// Where the Secret is mounted (`tls.crt`, `tls.key`).
pub const TLS_DIR: &str = "/etc/hcp-ingress/tls";
/// The config file's key in the ConfigMap.
pub const CONFIG_FILE: &str = "config.yaml";
/// The proxy-only binary of the image (`hcp-ingress proxy` without the
/// controller linked in): it runs on every node, so its resident memory is
/// paid once per node.
pub const PROXY_COMMAND: &str = "/hcp-ingress-proxy";
/// The proxy's admin port (`/healthz`, `/readyz`, `/metrics`), on 127.0.0.1,
/// with advertise-address steering.
pub const ADMIN_PORT: u16 = 9445;
/// The admin port with service steering. A steering switch runs both
/// DaemonSets on every node until the new one is ready; the admin listener
/// binds with SO_REUSEPORT, so on one port each DaemonSet's readiness probe
/// would be answered by either proxy at random.
pub const SERVICE_STEERING_ADMIN_PORT: u16 = 9446;

/// The admin port of a steering mode.
pub fn admin_port(steering: Steering) -> u16 {
    match steering {
        Steering::AdvertiseAddress => ADMIN_PORT,
        Steering::Service => SERVICE_STEERING_ADMIN_PORT,
    }
}
/// Pod-template annotation: hash of the settings the proxy reads only at start.
pub const RESTART_HASH_ANNOTATION: &str = "hcp-ingress.dev/restart-hash";

/// Port the proxy listens on when the inputs do not say.
const ADVERTISE_ADDRESS_PORT: u16 = 443;
/// With service steering pods reach the proxy on the `kubernetes` Service's
/// targetPort, which the API server reconciles and we leave alone: the proxy
/// listens on it. 6443 is the usual one; the controller passes the live one.
const SERVICE_STEERING_PORT: u16 = 6443;
/// The proxy's `timeouts.drain`; the pod's grace period leaves room beyond it.
const DRAIN_SECONDS: i64 = 30;
const GRACE_SECONDS: i64 = DRAIN_SECONDS + 10;
/// The distroless image's non-root user.
const NONROOT: i64 = 65532;

/// The port the proxy listens on: the inputs', else 443 (advertise address,
/// a private address) or 6443 (service steering).
pub fn proxy_port(spec: &ProxySpec, inputs: &WorkloadInputs) -> u16 {
    inputs.proxy_port.unwrap_or(match spec.steering {
        Steering::AdvertiseAddress => ADVERTISE_ADDRESS_PORT,
        Steering::Service => SERVICE_STEERING_PORT,
    })
}

/// Exactly the capabilities the proxy needs: NET_ADMIN to put the advertise
/// address on `lo` (advertise-address steering only), NET_BIND_SERVICE for a
/// port below 1024. Empty means the pod runs as non-root.
pub fn proxy_capabilities(spec: &ProxySpec, port: u16) -> Vec<&'static str> {
    let mut caps = Vec::new();
    if spec.steering == Steering::AdvertiseAddress {
        caps.push("NET_ADMIN");
    }
    if port < 1024 {
        caps.push("NET_BIND_SERVICE");
    }
    caps
}

/// The proxy config file (`hcp-ingress proxy --config`) as YAML.
pub fn proxy_config(cpi: &ControlPlaneIngress, inputs: &WorkloadInputs) -> String {
    let yaml = serde_saphyr::to_string(&config_file(cpi, inputs))
        .expect("the config schema serializes to YAML");
    format!(
        "# Written by hcp-ingress for ControlPlaneIngress {}; edits are overwritten.\n{yaml}",
        cpi_name(cpi)
    )
}

fn cpi_name(cpi: &ControlPlaneIngress) -> String {
    format!(
        "{}/{}",
        cpi.metadata.namespace.as_deref().unwrap_or_default(),
        cpi.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The config file, in the schema the proxy parses: what is not set here
/// takes the proxy's default.
fn config_file(cpi: &ControlPlaneIngress, inputs: &WorkloadInputs) -> RawConfig {
    let spec = proxy_spec(cpi);
    let ingress = &cpi.spec.ingress;
    let (address, manage_address) = match spec.steering {
        Steering::AdvertiseAddress => (
            advertise_address(&spec, inputs.service_ip).to_string(),
            true,
        ),
        // Pods reach the proxy on the node's own addresses (hostNetwork).
        Steering::Service if inputs.service_ip.is_ipv6() => ("::".to_string(), false),
        Steering::Service => ("0.0.0.0".to_string(), false),
    };
    RawConfig {
        listen: Some(RawListen {
            address: Some(address),
            port: Some(proxy_port(&spec, inputs).into()),
            interface: Some("lo".to_string()),
            manage_address: Some(manage_address),
            ..RawListen::default()
        }),
        mode: Some(mode(spec.mode)),
        upstream: Some(RawUpstream {
            server_name: Some(ingress.api_host.clone()),
            // The CRD bounds the port; one out of range still is (0), so the
            // proxy refuses it naming upstream.port instead of defaulting.
            port: Some(u64::try_from(ingress.port).unwrap_or(0)),
            addresses: (!spec.upstreams.is_empty()).then(|| spec.upstreams.clone()),
            // The ingress passes the tenant API server's own certificate through.
            ca_file: Some(format!("{CONFIG_DIR}/ca.crt").into()),
            ..RawUpstream::default()
        }),
        tls: spec.mode.terminates_tls().then(|| RawTls {
            cert_file: Some(format!("{TLS_DIR}/tls.crt").into()),
            key_file: Some(format!("{TLS_DIR}/tls.key").into()),
        }),
        // A client that already names the API host keeps end-to-end TLS (client certificates work).
        passthrough_server_names: Some(vec![ingress.api_host.clone()]),
        admin: Some(RawAdmin {
            address: Some(format!("127.0.0.1:{}", admin_port(spec.steering))),
        }),
        timeouts: Some(RawTimeouts {
            drain: Some(format!("{DRAIN_SECONDS}s")),
            ..RawTimeouts::default()
        }),
        log: Some(RawLog {
            format: Some(LogFormatKey::Json),
            level: None,
        }),
        ..RawConfig::default()
    }
}

fn mode(mode: ProxyMode) -> Mode {
    match mode {
        ProxyMode::Reencrypt => Mode::Reencrypt,
        ProxyMode::Passthrough => Mode::Passthrough,
        ProxyMode::ProxyProtocol => Mode::ProxyProtocol,
        ProxyMode::Pooled => Mode::Pooled,
    }
}

/// Hash of the restart-only settings: the pods roll when one changes and
/// only then. Certificates and the rest of the config hot-reload (the proxy
/// polls the mounted files), so a re-minted certificate never rolls a node.
/// Keys are the proxy's own list, dotted paths into the file.
fn restart_hash(config: &RawConfig) -> String {
    let value = serde_json::to_value(config).expect("the config schema serializes to JSON");
    let restart_only: BTreeMap<&str, &Value> = RESTART_ONLY_KEYS
        .iter()
        .filter_map(|k| {
            let pointer = format!("/{}", k.replace('.', "/"));
            value.pointer(&pointer).map(|v| (*k, v))
        })
        .collect();
    md5_hex(&restart_only)
}

/// The MD5 digest of a value's JSON text, in hex.
fn md5_hex(value: &impl serde::Serialize) -> String {
    let text = serde_json::to_string(value).expect("JSON values serialize");
    format!("{:x}", Md5::digest(text.as_bytes()))
}

pub(super) fn config_map(
    cpi: &ControlPlaneIngress,
    inputs: &WorkloadInputs,
) -> Result<ConfigMap, WorkloadError> {
    let namespace = proxy_namespace(proxy_spec(cpi).steering);
    let mut data = BTreeMap::from([(CONFIG_FILE.to_string(), proxy_config(cpi, inputs))]);
    if let Some(ca) = &inputs.ca_cert_pem {
        // Public: the trust anchor for the upstream, next to the config naming it,
        // so it reaches the proxy in every mode (the Secret exists in reencrypt only).
        data.insert("ca.crt".to_string(), ca.clone());
    }
    typed(
        "ConfigMap",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace, "labels": own_labels()},
            "data": data,
        }),
    )
}

/// The serving certificate, in reencrypt mode once one was minted.
pub(super) fn secret(
    spec: &ProxySpec,
    inputs: &WorkloadInputs,
) -> Result<Option<Secret>, WorkloadError> {
    let (true, Some(ProxyTls { cert_pem, key_pem })) = (spec.mode.terminates_tls(), &inputs.tls)
    else {
        return Ok(None);
    };
    let mut secret: Secret = typed(
        "Secret",
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": NAME, "namespace": proxy_namespace(spec.steering), "labels": own_labels()},
            "type": "kubernetes.io/tls",
        }),
    )?;
    // Certificate and key in one Secret: the kubelet swaps both at once, so
    // the proxy never reads a new certificate with an old key.
    secret.data = Some(BTreeMap::from([
        ("tls.crt".to_string(), bytes(cert_pem)),
        ("tls.key".to_string(), bytes(key_pem)),
    ]));
    Ok(Some(secret))
}

/// The proxy container's memory limit: what the proxy holds at its
/// connection limit (10,000 pod connections, `limits.maxConnections`'s
/// default) with room for bursts. An idle pod connection costs about 27 KB
/// pooled (hyper's read buffer and the TLS server side), 10 KB re-encrypted
/// and 1.5 KB passed through (docs/proxy.md), so 256 MiB holds 10,000 in
/// every mode but pooled: there the kernel would kill the proxy, and every
/// connection of the node with it, before the proxy's own limit refused
/// one (seen on a real node, test/ingress/node.rs).
fn memory_limit(mode: ProxyMode) -> &'static str {
    match mode {
        ProxyMode::Pooled => "512Mi",
        ProxyMode::Reencrypt | ProxyMode::Passthrough | ProxyMode::ProxyProtocol => "256Mi",
    }
}

pub(super) fn daemon_set(
    cpi: &ControlPlaneIngress,
    inputs: &WorkloadInputs,
) -> Result<DaemonSet, WorkloadError> {
    let spec = proxy_spec(cpi);
    let port = proxy_port(&spec, inputs);
    let caps = proxy_capabilities(&spec, port);
    let image = if spec.image.is_empty() {
        inputs.image.clone()
    } else {
        spec.image.clone()
    };
    let reencrypt = spec.mode.terminates_tls();
    // Capabilities reach a process only as root: Kubernetes sets no ambient
    // capabilities, so a non-root user would get an empty effective set.
    // Without capabilities the proxy runs as the image's non-root user.
    let as_root = !caps.is_empty();
    // Files readable by the process only: root owns them (0400), or the
    // non-root user reads them through fsGroup (0440).
    let file_mode = if as_root { 0o400 } else { 0o440 };
    let pod_security = if as_root {
        json!({"seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 0, "runAsNonRoot": false})
    } else {
        json!({"seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": NONROOT, "runAsGroup": NONROOT,
               "runAsNonRoot": true, "fsGroup": NONROOT})
    };
    let probe = |path: &str, period: u32, failures: u32| {
        json!({"httpGet": {"host": "127.0.0.1", "path": path, "port": admin_port(spec.steering), "scheme": "HTTP"},
               "periodSeconds": period, "timeoutSeconds": 2, "failureThreshold": failures})
    };
    // No subPath: the kubelet updates whole ConfigMap/Secret volumes in place
    // (subPath mounts never update), which is what makes hot reload work.
    let mut mounts = vec![json!({"name": "config", "mountPath": CONFIG_DIR, "readOnly": true})];
    let mut volumes =
        vec![json!({"name": "config", "configMap": {"name": NAME, "defaultMode": file_mode}})];
    if reencrypt {
        mounts.push(json!({"name": "tls", "mountPath": TLS_DIR, "readOnly": true}));
        volumes
            .push(json!({"name": "tls", "secret": {"secretName": NAME, "defaultMode": file_mode}}));
    }
    let config = config_file(cpi, inputs);
    // The API server drops an empty list: an `add: []` would never match
    // the live object, and the DaemonSet would be written on every pass.
    let capabilities = if caps.is_empty() {
        json!({"drop": ["ALL"]})
    } else {
        json!({"drop": ["ALL"], "add": caps})
    };
    let mut daemon_set = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": proxy_namespace(spec.steering), "labels": own_labels()},
        "spec": {
            "selector": {"matchLabels": selector_labels()},
            // Surge: the new pod starts next to the old one on each node
            // (the proxy binds with SO_REUSEPORT, crates/proxy/src/server.rs) and
            // the old one goes only once the new one is ready, so no node
            // is ever without a proxy. That is why the container declares
            // no ports: a hostNetwork pod's ports are host ports, and the
            // scheduler never puts a second pod with the same host port on
            // a node, so a surge pod would stay Pending for ever. Rolls are
            // rare anyway: config and certificates hot-reload; only the
            // image or a restart-only setting changes the pod template.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": own_labels(),
                    "annotations": {RESTART_HASH_ANNOTATION: restart_hash(&config)},
                },
                "spec": {
                    "hostNetwork": true,
                    // The node's resolver, not cluster DNS: CoreDNS reaches
                    // the API through this proxy, so resolving the API host
                    // through CoreDNS would be a bootstrap cycle.
                    "dnsPolicy": "Default",
                    "priorityClassName": "system-node-critical",
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "terminationGracePeriodSeconds": GRACE_SECONDS,
                    // Every node, whatever its taints: pods there need the API.
                    "tolerations": [{"operator": "Exists"}],
                    "securityContext": pod_security,
                    "containers": [{
                        "name": "proxy",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [PROXY_COMMAND],
                        "args": ["--config", format!("{CONFIG_DIR}/{CONFIG_FILE}")],
                        // Any process on the admin port answers liveness: a
                        // wrong answer only delays a restart.
                        "livenessProbe": probe("/healthz", 10, 3),
                        "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": memory_limit(spec.mode)}},
                        "securityContext": {
                            "privileged": false,
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": capabilities,
                        },
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    });
    // Readiness must come from this pod's own process, not from the old pod
    // sharing the admin port during a surge: the probe names the revision of
    // the pod template, and only a process started with it answers ready.
    let revision = template_revision(&daemon_set["spec"]["template"]);
    let container = &mut daemon_set["spec"]["template"]["spec"]["containers"][0];
    container["env"] = json!([{"name": "HCP_PROXY_REVISION", "value": revision}]);
    container["readinessProbe"] = probe(&format!("/readyz/{revision}"), 5, 2);
    typed("DaemonSet", daemon_set)
}

/// A digest of a pod template: changes with anything that rolls the pods.
fn template_revision(template: &Value) -> String {
    md5_hex(template)[..16].to_string()
}

/// `default/kubernetes` of `kind`, ours (`labels`), that points the
/// `kubernetes` Service at the advertise address: `fields` gets the address,
/// its EndpointSlice `addressType` and the proxy's `https` port, and returns
/// what the Endpoints and the EndpointSlice spell differently.
fn steering_object<T: DeserializeOwned>(
    spec: &ProxySpec,
    inputs: &WorkloadInputs,
    (api_version, kind): (&str, &'static str),
    labels: BTreeMap<String, String>,
    fields: impl FnOnce(String, &'static str, Value) -> Value,
) -> Result<T, WorkloadError> {
    let address = advertise_address(spec, inputs.service_ip);
    let family = if address.is_ipv6() { "IPv6" } else { "IPv4" };
    let ports = json!([{"name": "https", "port": proxy_port(spec, inputs), "protocol": "TCP"}]);
    let mut object = fields(address.to_string(), family, ports);
    object["apiVersion"] = api_version.into();
    object["kind"] = kind.into();
    object["metadata"] = json!({"name": "kubernetes", "namespace": "default", "labels": labels});
    typed(kind, object)
}

pub(super) fn endpoints(
    spec: &ProxySpec,
    inputs: &WorkloadInputs,
) -> Result<Endpoints, WorkloadError> {
    let mut labels = own_labels();
    // The mirroring controller must not turn these into a second EndpointSlice.
    labels.insert(SKIP_MIRROR_LABEL.to_string(), "true".to_string());
    steering_object(
        spec,
        inputs,
        ("v1", "Endpoints"),
        labels,
        |address, _, ports| json!({"subsets": [{"addresses": [{"ip": address}], "ports": ports}]}),
    )
}

pub(super) fn endpoint_slice(
    spec: &ProxySpec,
    inputs: &WorkloadInputs,
) -> Result<EndpointSlice, WorkloadError> {
    let mut labels = own_labels();
    labels.insert(
        "kubernetes.io/service-name".to_string(),
        "kubernetes".to_string(),
    );
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".to_string(),
        ENDPOINT_SLICE_MANAGER.to_string(),
    );
    steering_object(
        spec,
        inputs,
        ("discovery.k8s.io/v1", "EndpointSlice"),
        labels,
        |address, family, ports| {
            json!({
                "addressType": family,
                // Every node answers on this address itself, so it is always ready.
                "endpoints": [{"addresses": [address], "conditions": {"ready": true, "serving": true, "terminating": false}}],
                "ports": ports,
            })
        },
    )
}

/// The first step of a switch to service steering: the selector without
/// `internalTrafficPolicy: Local`, so that kube-proxy keeps using the
/// advertise address's node-less EndpointSlice while the EndpointSlice
/// controller writes the proxy pods' slices.
pub fn service_handover_patch() -> DynamicObject {
    let mut patch = service_patch();
    if let Some(spec) = patch.data.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("internalTrafficPolicy");
    }
    patch
}

/// Partial `default/kubernetes` Service: the fields we own, nothing else.
pub(super) fn service_patch() -> DynamicObject {
    let value = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {
            "selector": selector_labels(),
            // Each pod's own node's proxy: traffic never crosses nodes.
            "internalTrafficPolicy": "Local",
            // A proxy pod is an endpoint as soon as it runs: its readiness
            // must travel through the API, and the add-ons that come up
            // first (CNI, CoreDNS) need this very path (k0smotron's
            // bootstrap deadlock).
            "publishNotReadyAddresses": true,
        },
    });
    serde_json::from_value(value).expect("a Service with metadata is a DynamicObject")
}
