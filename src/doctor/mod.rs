//! `hcp-ingress doctor`: checks every hop of one tenant's path, in data-path
//! order — DNS, the route, TLS through the shared ingress, the workload
//! cluster's `default/kubernetes` steering, the node proxy, the CCM env, the
//! konnectivity agents — and prints a table with what to fix for each
//! failure.
//!
//! `checks` decides (pure, unit tested); `probe` reads (DNS, API servers);
//! this file runs one after the other. Exit codes: 0 every check passed (or
//! warned), 1 a check failed or a cluster could not be read, 2 bad input.

pub mod checks;
mod error;
pub mod probe;

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, SystemTime},
};

use kube::{Client, ResourceExt};

pub use checks::{Check, Verdict};
pub use error::DoctorError;
pub use probe::{Resolver, Target};

use crate::{
    api::ControlPlaneIngress,
    controller::probe::{self as tls_probe, ProbeFailure},
    render::{self, RouteKind, workload},
};

/// Flags of `hcp-ingress doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// The ControlPlaneIngress to check.
    #[arg(required_unless_present = "cluster", conflicts_with = "cluster")]
    pub name: Option<String>,
    /// Its namespace [default: the kubeconfig's; with --cluster: every namespace].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Check the ControlPlaneIngress whose spec.clusterName is this CAPI Cluster.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Management cluster kubeconfig [default: KUBECONFIG, ~/.kube/config, in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Workload cluster kubeconfig [default: Secret <cluster>-kubeconfig, as the controller reads it].
    #[arg(long, value_name = "FILE")]
    pub workload_kubeconfig: Option<PathBuf>,
    /// Address(es) of the shared ingress (IP or host name) [default: from the route's status].
    #[arg(long, value_name = "ADDRESS", value_delimiter = ',')]
    pub ingress_address: Vec<String>,
    /// Ask this DNS server (ip:port, UDP) instead of the system resolver.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_server: Option<SocketAddr>,
    /// Time limit of each network probe, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub timeout: u64,
}

/// What one run of the doctor needs besides the management client.
#[derive(Clone, Debug)]
pub struct Options {
    /// The ControlPlaneIngress to check.
    pub target: Target,
    /// How host names are resolved.
    pub resolver: Resolver,
    /// The shared ingress's address(es), when given; else read from the route.
    pub ingress_address: Vec<String>,
    /// A workload kubeconfig file instead of Secret `<cluster>-kubeconfig`.
    pub workload_kubeconfig: Option<PathBuf>,
    /// Limit of each network probe.
    pub timeout: Duration,
}

/// Entry point of `hcp-ingress doctor`.
pub fn main(args: DoctorArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    runtime.block_on(async move {
        match run(args).await {
            Ok((cpi, checks)) => {
                println!("{}", render::describe(&cpi));
                print!("{}", checks::table(&checks));
                ExitCode::from(checks::exit_code(&checks))
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::from(error.exit_code())
            }
        }
    })
}

/// The flags made into [`Options`], then [`diagnose`].
async fn run(args: DoctorArgs) -> Result<(ControlPlaneIngress, Vec<Check>), DoctorError> {
    let client = probe::management_client(args.kubeconfig.as_deref()).await?;
    let target = match (args.name, args.cluster) {
        (Some(name), _) => Target::Name {
            namespace: args
                .namespace
                .unwrap_or_else(|| client.default_namespace().to_string()),
            name,
        },
        (None, Some(cluster)) => Target::Cluster {
            namespace: args.namespace,
            cluster,
        },
        (None, None) => unreachable!("clap requires a name or --cluster"),
    };
    let options = Options {
        target,
        resolver: args
            .dns_server
            .map(Resolver::Server)
            .unwrap_or(Resolver::System),
        ingress_address: args.ingress_address,
        workload_kubeconfig: args.workload_kubeconfig,
        timeout: Duration::from_secs(args.timeout),
    };
    diagnose(&client, &options).await
}

/// Run every check for the ControlPlaneIngress of `options.target`, in
/// data-path order. `Err` only when there is nothing to check; a hop that
/// cannot be read is a failed check.
pub async fn diagnose(
    client: &Client,
    options: &Options,
) -> Result<(ControlPlaneIngress, Vec<Check>), DoctorError> {
    let cpi = probe::control_plane_ingress(client, &options.target).await?;
    let namespace = cpi.namespace().unwrap_or_default();
    let mut report = Vec::new();

    // The route objects, read first: their status holds the ingress's address.
    let mut wanted: Vec<(RouteKind, String)> = render::management(&cpi)?
        .iter()
        .map(|o| (RouteKind::of(cpi.spec.flavor()), o.name_any()))
        .collect();
    // The provider's own route for the API host (k0smotron, Steward): it is a hop too.
    if let Some(upstream) = render::upstream_route(&cpi)
        && let Some(kind) = RouteKind::from_kind(&upstream.kind)
    {
        wanted.insert(0, (kind, upstream.name.clone()));
    }
    let mut live = Vec::new();
    for (kind, name) in &wanted {
        let object = probe::get_dynamic(client, &kind.api_resource(), &namespace, name)
            .await
            .map_err(|source| DoctorError::Management {
                what: format!("read {} {namespace}/{name}", kind.gvk().kind),
                source,
            })?;
        live.push(object);
    }
    let ingress = ingress_address(client, &cpi, &options.ingress_address, &live).await;
    let mut ingress_ips = Vec::new();
    let mut unresolved = Vec::new();
    for address in ingress.iter().flat_map(|i| &i.addresses) {
        match probe::resolve(options.resolver, address, options.timeout).await {
            Ok(ips) => ingress_ips.extend(ips),
            Err(why) => unresolved.push((address.clone(), why)),
        }
    }
    // A load balancer host name that does not resolve is itself a broken hop.
    if let Some(ingress) = &ingress
        && !unresolved.is_empty()
    {
        report.push(checks::ingress_unresolved(ingress, &unresolved));
    }
    let expected = ingress
        .as_ref()
        .filter(|_| !ingress_ips.is_empty())
        .map(|i| (i, ingress_ips.as_slice()));

    // 1. DNS.
    let mut resolved: Vec<(String, Result<Vec<IpAddr>, String>)> = Vec::new();
    for host in checks::hosts(&cpi) {
        let ips = probe::resolve(options.resolver, &host, options.timeout).await;
        report.push(checks::dns(&host, &ips, expected));
        resolved.push((host, ips));
    }
    // 2. Route, and what the controller last said.
    report.extend(checks::routes(&cpi, &wanted, &live));
    report.push(checks::conditions(&cpi));
    // 3. TLS through the ingress: to the ingress's address when known (what
    // the route should reach), else where DNS sends clients.
    let port = u16::try_from(cpi.spec.ingress.port).unwrap_or(443);
    let ca = probe::cluster_ca(client, &cpi).await;
    for (host, ips) in &resolved {
        let targets: Vec<String> = if ingress_ips.is_empty() {
            ips.iter().flatten().map(IpAddr::to_string).collect()
        } else {
            ingress_ips.iter().map(IpAddr::to_string).collect()
        };
        let handshake = if targets.is_empty() {
            Err(ProbeFailure {
                reason: "NoAddress",
                message: format!(
                    "no address to connect to: {host} does not resolve and the shared ingress's address is unknown (pass --ingress-address)"
                ),
            })
        } else {
            tls_probe::handshake(host, port, &targets, options.timeout).await
        };
        report.push(checks::tls(host, &handshake, &ca, SystemTime::now()));
    }
    // 4-6. The workload cluster.
    report.extend(workload_checks(client, &cpi, options).await);
    Ok((cpi, report))
}

/// The shared ingress's address: the flag, else the route objects' status,
/// else (TLSRoute) the status of their Gateways.
async fn ingress_address(
    client: &Client,
    cpi: &ControlPlaneIngress,
    flag: &[String],
    live: &[Option<kube::api::DynamicObject>],
) -> Option<checks::IngressAddress> {
    if !flag.is_empty() {
        return Some(checks::IngressAddress {
            source: "--ingress-address".into(),
            addresses: flag.to_vec(),
        });
    }
    for object in live.iter().flatten() {
        let addresses = checks::status_addresses(object);
        if !addresses.is_empty() {
            let kind = object
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            return Some(checks::IngressAddress {
                source: format!(
                    "status.loadBalancer of {kind} {}/{}",
                    object.namespace().unwrap_or_default(),
                    object.name_any()
                ),
                addresses,
            });
        }
    }
    let parents = cpi
        .spec
        .route
        .as_ref()
        .and_then(|r| r.gateway.as_ref())
        .map(|g| g.parent_refs.clone())
        .unwrap_or_default();
    for parent in parents {
        let namespace = parent
            .namespace
            .clone()
            .or_else(|| cpi.namespace())
            .unwrap_or_default();
        if let Ok(Some(gateway)) =
            probe::get_dynamic(client, &probe::gateway_resource(), &namespace, &parent.name).await
        {
            let addresses = checks::status_addresses(&gateway);
            if !addresses.is_empty() {
                return Some(checks::IngressAddress {
                    source: format!("status.addresses of Gateway {namespace}/{}", parent.name),
                    addresses,
                });
            }
        }
    }
    None
}

async fn workload_checks(
    client: &Client,
    cpi: &ControlPlaneIngress,
    options: &Options,
) -> Vec<Check> {
    let skipped = |why: &str| {
        ["steering", "node proxy", "ccm env", "konnectivity"].map(|name| Check {
            name: name.into(),
            verdict: Verdict::Skip,
            detail: why.to_string(),
        })
    };
    let (workload, through) =
        match probe::workload_client(client, cpi, options.workload_kubeconfig.as_deref()).await {
            Ok(found) => found,
            Err(why) => {
                let mut out = vec![checks::workload_unreachable(&why)];
                out.extend(skipped("the workload cluster was not reached"));
                return out;
            }
        };
    let state = match probe::workload_state(&workload, cpi).await {
        Ok(state) => state,
        Err(why) => {
            let mut out = vec![checks::workload_unreachable(&format!(
                "through {through}: {why}"
            ))];
            out.extend(skipped("the workload cluster was not reached"));
            return out;
        }
    };
    let mut out = vec![checks::workload_reachable(&through)];
    let spec = workload::proxy_spec(cpi);
    // What the controller would write, from the same live facts it reads.
    let inputs = workload::inputs_from_service(
        spec.steering,
        state.service.as_ref(),
        workload::WorkloadInputs::default(),
    );
    match workload::proxy(cpi, &inputs) {
        Ok(wanted) => {
            let steering = checks::steering(
                cpi,
                wanted.as_ref().map(|w| &w.steering),
                state.endpoints.as_ref(),
                state.endpoint_slice.as_ref(),
                state.service.as_ref(),
            );
            out.push(checks::steering_reaches_proxy(
                cpi,
                steering,
                state.service.as_ref(),
                &state.service_slices,
            ));
        }
        // A spec the controller refuses for this cluster (an advertise
        // address of the other family): it steers nothing.
        Err(e) => out.push(checks::steering_refused(&e.to_string())),
    }
    let ours = spec.enabled
        && cpi
            .spec
            .upstream
            .as_ref()
            .is_none_or(|u| u.kept_node_proxy().is_none());
    out.push(checks::proxy(cpi, ours, state.daemon_set.as_ref()));
    out.push(checks::ccm(cpi, &state.ccm_found, &state.ccm_missing));
    let agents = match cpi.spec.ingress.konnectivity_host {
        Some(_) => probe::konnectivity_agents(&workload, options.timeout).await,
        None => Ok(Vec::new()),
    };
    out.push(checks::konnectivity(
        cpi,
        agents.as_deref().map_err(String::as_str),
    ));
    out
}
