//! The I/O edge of `doctor`: DNS look-ups, reads from the management and
//! workload API servers. Nothing here decides; `checks.rs` does.

use std::{
    hash::{BuildHasher, Hasher},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Endpoints, Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::net::UdpSocket;

use super::{checks, error::DoctorError};
use crate::{
    api::ControlPlaneIngress,
    controller::redact,
    proxy::dns,
    render::workload::{self, NAME, OverrideTarget},
};

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// How host names are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolver {
    /// The system resolver (getaddrinfo: /etc/hosts, then DNS), as clients do.
    System,
    /// A DNS server asked directly over UDP (A and AAAA).
    Server(SocketAddr),
}

/// Resolve `host` to its addresses; `Err` says why not, in words.
pub async fn resolve(
    resolver: Resolver,
    host: &str,
    timeout: Duration,
) -> Result<Vec<IpAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    match resolver {
        Resolver::System => {
            match tokio::time::timeout(timeout, tokio::net::lookup_host((host, 0))).await {
                Ok(Ok(found)) => {
                    let mut ips: Vec<IpAddr> = found.map(|a| a.ip()).collect();
                    ips.sort();
                    ips.dedup();
                    Ok(ips)
                }
                Ok(Err(e)) => Err(format!("system resolver: {e}")),
                Err(_) => Err(format!("system resolver: no answer within {timeout:?}")),
            }
        }
        Resolver::Server(server) => {
            let (a, aaaa) = tokio::join!(
                ask(server, host, TYPE_A, timeout),
                ask(server, host, TYPE_AAAA, timeout)
            );
            match (a, aaaa) {
                (Err(e), Err(_)) => Err(e),
                (a, aaaa) => {
                    let mut ips: Vec<IpAddr> = a.unwrap_or_default();
                    ips.extend(aaaa.unwrap_or_default());
                    Ok(ips)
                }
            }
        }
    }
}

/// One query to `server`, with the query and answer code of the node
/// proxy's own stub resolver; an error answer is named.
async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Vec<IpAddr>, String> {
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(bind)
        .await
        .map_err(|e| format!("failed to open a UDP socket: {e}"))?;
    socket
        .connect(server)
        .await
        .map_err(|e| format!("DNS server {server}: {e}"))?;
    // RandomState is seeded randomly per instance: enough for a query id.
    let id = {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u16(qtype);
        h.finish() as u16
    };
    let query = dns::query(id, name, qtype).ok_or_else(|| format!("{name} is not a DNS name"))?;
    socket
        .send(&query)
        .await
        .map_err(|e| format!("DNS server {server}: {e}"))?;
    let mut buf = vec![0u8; 1500];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(format!("DNS server {server}: {e}")),
            Err(_) => return Err(format!("DNS server {server}: no answer within {timeout:?}")),
        };
        let answer = &buf[..n];
        if answer.len() < 12 || u16::from_be_bytes([answer[0], answer[1]]) != id {
            continue; // not ours
        }
        let rcode = answer[3] & 0x0f;
        if rcode != 0 {
            return Err(format!(
                "DNS server {server} answered {}",
                rcode_name(rcode)
            ));
        }
        return dns::parse_answer(answer, id, qtype)
            .map(|(ips, _)| ips)
            .ok_or_else(|| format!("DNS server {server}: unreadable or truncated answer"));
    }
}

fn rcode_name(rcode: u8) -> String {
    match rcode {
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN (no such name)".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        n => format!("error code {n}"),
    }
}

/// A client from a kubeconfig text; errors never quote the text (it holds
/// credentials). `origin` names where the text came from.
pub async fn client_from_kubeconfig(text: &str, origin: &str) -> Result<Client, String> {
    let scrubbed = |e: String| format!("{origin}: {}", redact::scrub(&e, text));
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| scrubbed(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| scrubbed(e.to_string()))?;
    // A doctor must answer promptly when a cluster is unreachable.
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(15));
    Client::try_from(config).map_err(|e| scrubbed(e.to_string()))
}

/// The management client: `--kubeconfig`, else KUBECONFIG / ~/.kube/config /
/// in-cluster, as kubectl finds it.
pub async fn management_client(kubeconfig: Option<&Path>) -> Result<Client, DoctorError> {
    match kubeconfig {
        Some(path) => {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| DoctorError::Read {
                path: origin.clone(),
                source,
            })?;
            client_from_kubeconfig(&text, &origin)
                .await
                .map_err(DoctorError::Kubeconfig)
        }
        None => {
            let config = Config::infer()
                .await
                .map_err(|e| DoctorError::Kubeconfig(format!("no management cluster: {e}")))?;
            Client::try_from(config).map_err(|e| DoctorError::Kubeconfig(e.to_string()))
        }
    }
}

/// Which ControlPlaneIngress to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// By name, in a namespace.
    Name {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The one whose `spec.clusterName` is `cluster`, in `namespace` or anywhere.
    Cluster {
        /// Namespace; `None`: every namespace.
        namespace: Option<String>,
        /// The CAPI Cluster's name.
        cluster: String,
    },
}

/// Read the ControlPlaneIngress of `target`.
pub async fn control_plane_ingress(
    client: &Client,
    target: &Target,
) -> Result<ControlPlaneIngress, DoctorError> {
    let read = |what: String| move |source| DoctorError::Management { what, source };
    match target {
        Target::Name { namespace, name } => {
            Api::<ControlPlaneIngress>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(read(format!("read ControlPlaneIngress {namespace}/{name}")))?
                .ok_or_else(|| {
                    DoctorError::NotFound(format!("ControlPlaneIngress {namespace}/{name}"))
                })
        }
        Target::Cluster { namespace, cluster } => {
            let api: Api<ControlPlaneIngress> = match namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            };
            let all = api
                .list(&ListParams::default())
                .await
                .map_err(read("list ControlPlaneIngresses".into()))?;
            let mut matching: Vec<ControlPlaneIngress> = all
                .items
                .into_iter()
                .filter(|c| c.spec.cluster_name == *cluster)
                .collect();
            let where_ = namespace
                .as_ref()
                .map(|ns| format!("namespace {ns}"))
                .unwrap_or_else(|| "any namespace".into());
            match matching.len() {
                0 => Err(DoctorError::NotFound(format!(
                    "a ControlPlaneIngress with spec.clusterName {cluster} in {where_}"
                ))),
                1 => Ok(matching.remove(0)),
                _ => Err(DoctorError::Ambiguous {
                    cluster: cluster.clone(),
                    found: matching.iter().map(crate::render::describe).collect(),
                }),
            }
        }
    }
}

/// Get a namespaced object of `resource`; `None` when absent (or its kind is not served).
pub async fn get_dynamic(
    client: &Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource)
        .get_opt(name)
        .await
}

/// The Gateway API Gateway resource (to read the address of a TLSRoute's parent).
pub fn gateway_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "Gateway"),
        "gateways",
    )
}

/// The workload cluster's client: from `--workload-kubeconfig`, else from
/// Secret `<cluster>-kubeconfig` (key `value`) as the controller reads it.
/// Returns the client and where it came from, for the report.
pub async fn workload_client(
    mgmt: &Client,
    cpi: &ControlPlaneIngress,
    file: Option<&Path>,
) -> Result<(Client, String), String> {
    if let Some(path) = file {
        let origin = format!("--workload-kubeconfig {}", path.display());
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("failed to read {origin}: {e}"))?;
        return Ok((client_from_kubeconfig(&text, &origin).await?, origin));
    }
    let namespace = cpi.namespace().unwrap_or_default();
    let name = format!("{}-kubeconfig", cpi.spec.cluster_name);
    let origin = format!("Secret {namespace}/{name}");
    let secret = Api::<Secret>::namespaced(mgmt.clone(), &namespace)
        .get_opt(&name)
        .await
        .map_err(|e| format!("failed to read {origin}: {e}"))?;
    let Some(value) = secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove("value"))
    else {
        return Err(format!(
            "{origin} with key `value` not found: CAPI writes it once the control plane is up (or pass --workload-kubeconfig)"
        ));
    };
    let text = String::from_utf8(value.0).map_err(|_| format!("{origin}: `value` is not UTF-8"))?;
    Ok((client_from_kubeconfig(&text, &origin).await?, origin))
}

/// The cluster CA certificate (`tls.crt` of Secret `<cluster>-ca`), which the
/// tenant API server's certificate chains to; `Err` says why it is not
/// available. The key in the same Secret is dropped unread.
pub async fn cluster_ca(mgmt: &Client, cpi: &ControlPlaneIngress) -> checks::ClusterCa {
    let namespace = cpi.namespace().unwrap_or_default();
    let name = format!("{}-ca", cpi.spec.cluster_name);
    let origin = format!("Secret {namespace}/{name}");
    let secret = Api::<Secret>::namespaced(mgmt.clone(), &namespace)
        .get_opt(&name)
        .await
        .map_err(|e| format!("failed to read {origin}: {e}"))?
        .ok_or_else(|| format!("{origin} not found"))?;
    let cert = secret
        .data
        .and_then(|mut d| d.remove("tls.crt"))
        .and_then(|b| String::from_utf8(b.0).ok())
        .ok_or_else(|| format!("{origin} has no tls.crt"))?;
    Ok((origin, cert))
}

/// What the workload cluster holds for the steering, proxy and CCM checks.
pub struct WorkloadState {
    /// `default/kubernetes` Service.
    pub service: Option<Service>,
    /// `default/kubernetes` Endpoints.
    pub endpoints: Option<Endpoints>,
    /// `default/kubernetes` EndpointSlice.
    pub endpoint_slice: Option<EndpointSlice>,
    /// Every EndpointSlice of the `kubernetes` Service.
    pub service_slices: Vec<EndpointSlice>,
    /// The proxy DaemonSet, in the namespace of the steering mode.
    pub daemon_set: Option<DaemonSet>,
    /// Each CCM found, with the target that found it.
    pub ccm_found: Vec<(OverrideTarget, DynamicObject)>,
    /// `spec.ccm.targets` entries that do not exist.
    pub ccm_missing: Vec<String>,
}

/// Read everything the workload checks look at.
pub async fn workload_state(
    client: &Client,
    cpi: &ControlPlaneIngress,
) -> Result<WorkloadState, String> {
    let failed = |what: &str| {
        let what = what.to_string();
        move |e: kube::Error| format!("failed to read {what} in the workload cluster: {e}")
    };
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(failed("Service default/kubernetes"))?;
    let endpoints = Api::<Endpoints>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(failed("Endpoints default/kubernetes"))?;
    let endpoint_slice = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(failed("EndpointSlice default/kubernetes"))?;
    let service_slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .map_err(failed("EndpointSlices of Service default/kubernetes"))?
        .items;
    let namespace = workload::proxy_namespace(workload::proxy_spec(cpi).steering);
    let daemon_set = Api::<DaemonSet>::namespaced(client.clone(), namespace)
        .get_opt(NAME)
        .await
        .map_err(failed(&format!("DaemonSet {namespace}/{NAME}")))?;
    // Found as the controller finds them.
    let (ccm_found, ccm_missing) = crate::controller::find_ccm_workloads(client, cpi)
        .await
        .map_err(|(what, e)| format!("failed to {what}: {e}"))?;
    Ok(WorkloadState {
        service,
        endpoints,
        endpoint_slice,
        service_slices,
        daemon_set,
        ccm_found,
        ccm_missing,
    })
}

/// The konnectivity agent pods of the workload cluster (running ones, at
/// most [`checks::KONNECTIVITY_AGENTS_READ`]) and each one's metrics, read
/// through the workload API server's pod proxy: the API server reaches the
/// pod as it reaches a kubelet for `kubectl logs`, through konnectivity when
/// its egress selector sends cluster traffic there.
pub async fn konnectivity_agents(
    client: &Client,
    timeout: Duration,
) -> Result<Vec<checks::KonnectivityAgent>, String> {
    let namespace = "kube-system";
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(checks::KONNECTIVITY_AGENT_SELECTOR))
        .await
        .map_err(|e| {
            format!(
                "failed to list the pods labelled {} in {namespace} of the workload cluster: {e}",
                checks::KONNECTIVITY_AGENT_SELECTOR
            )
        })?;
    let running = pods
        .items
        .into_iter()
        .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
    let mut agents = Vec::new();
    for pod in running.take(checks::KONNECTIVITY_AGENTS_READ) {
        let name = pod.name_any();
        let port = checks::konnectivity_agent_port(&pod);
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics");
        let metrics = match http::Request::get(&path).body(Vec::new()) {
            Ok(request) => {
                match tokio::time::timeout(timeout, client.request_text(request)).await {
                    Ok(Ok(text)) => Ok(text),
                    Ok(Err(e)) => Err(first_line(&e.to_string())),
                    Err(_) => Err(format!("no answer within {timeout:?}")),
                }
            }
            Err(e) => Err(format!("GET {path}: {e}")),
        };
        agents.push(checks::KonnectivityAgent { pod: name, metrics });
    }
    Ok(agents)
}

/// The first line of an error, at most 300 characters: an API server's
/// error for a proxied request can carry a whole upstream response.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(300) {
        Some((end, _)) => format!("{}...", &line[..end]),
        None => line.to_string(),
    }
}

/// The CCM workloads the controller would patch: explicit targets (missing
/// ones reported), the well-known names, and those `spec.ccm.selector` selects.
#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_system_resolver_and_literal_addresses() {
        let t = Duration::from_secs(5);
        let localhost = resolve(Resolver::System, "localhost", t).await.unwrap();
        assert!(localhost.iter().all(IpAddr::is_loopback) && !localhost.is_empty());
        // An address is its own answer, whatever the resolver.
        let server = Resolver::Server("127.0.0.1:9".parse().unwrap());
        assert_eq!(
            resolve(server, "192.0.2.1", t).await.unwrap(),
            ["192.0.2.1".parse::<IpAddr>().unwrap()]
        );
    }

    #[tokio::test]
    async fn a_dns_server_that_does_not_answer_is_an_error_not_an_empty_answer() {
        // A bound socket that never answers.
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server = Resolver::Server(silent.local_addr().unwrap());
        let why = resolve(server, "api.example.com", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(why.contains("no answer within"), "{why}");
    }
}
