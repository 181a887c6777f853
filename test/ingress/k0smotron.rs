//! The real k0smotron beside hcp-ingress on one management cluster, both
//! majors: v1.10.9 (the last v1 release, `v1beta1` APIs only, from the Go
//! module proxy) and v2.1.0 (`v1beta2` stored, `v1beta1` converted by its
//! own conversion webhook; built from its source in ../shared, the proxy
//! refuses its module path). k0smotron's manager runs as a process against
//! the management API server, as its control-plane provider
//! (`--enable-controller control-plane`), with its admission webhooks served
//! to the API server (the k0smotron `Cluster` webhook is what defaults
//! `ingress.deploy` to true). No kubelet runs: the control plane's StatefulSet never starts,
//! which is fine: what hcp-ingress reads is what k0smotron writes for
//! `spec.ingress` before that (the Ingress `kmc-<cluster>`, its ConfigMaps
//! and Service). Traefik's ingress-nginx provider stands as the shared
//! ingress controller: it admits k0smotron's Ingress (status.loadBalancer)
//! and passes TLS through it to the tenant's real kube-apiserver.
//!
//! What a user of k0smotron depends on: one ControlPlaneIngress per
//! cluster, no second route for a host k0smotron already routes (two
//! Ingresses claiming one host is a conflict for every ingress
//! controller), the CCM override that k0smotron does not make, and, with
//! `deploy: false`, the route k0smotron leaves to "the user" made by
//! hcp-ingress. And k0smotron v1 (`v1beta1`) and v2 (`v1beta2`) objects
//! derive the same ControlPlaneIngress, so upgrading k0smotron changes
//! nothing on our side.
//!
//! Where v2 behaves differently the test says so: on a k0s release that
//! deploys the konnectivity agent itself (v1.35.1 and newer) v2 ships no
//! agent ConfigMap `kmc-<cluster>-ingress-konnectivity`, and its
//! K0smotronControlPlane is read at `v1beta2`.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use hcp_ingress::{
    api::{CLUSTER_NAME_LABEL, ControlPlaneIngress, MANAGER},
    doctor::{Check, Verdict},
    render::{ROUTE_PREFIX, RouteKind, workload::K0SMOTRON_STOP_PATCH},
    sources::derive,
};
use k8s_openapi::{
    ByteString,
    api::{apps::v1::Deployment, core::v1::ConfigMap, networking::v1::Ingress},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{
    bed::{
        API_HOST, API_PORT, Bed, KONNECTIVITY_HOST, KONNECTIVITY_PORT, NS, apply, doctor_row,
        eventually, ready, repo,
    },
    consumers::{Process, assert_passthrough, bin_dir, free_port, http_get},
};

/// How to get what these tests need.
const HOW_TO_BUILD: &str = "run `bash hack/consumers/build.sh` (builds both k0smotron majors and Traefik: v1 from the Go module proxy, v2 from ../shared/k0smotron-v2.1.0; versions in hack/consumers/versions.env)";

/// The CAPI Cluster whose control plane k0smotron makes its Ingress for;
/// its hosts and Service ports are the bed's, so that k0smotron's Ingress
/// leads to the bed's tenant API server.
const ROUTED: &str = "tenant-01";
/// The CAPI Cluster whose K0smotronControlPlane says `deploy: false`.
const MANUAL: &str = "tenant-02";
const MANUAL_API_HOST: &str = "api.tenant-02.hcp.example.com";
const MANUAL_KONNECTIVITY_HOST: &str = "konnectivity.tenant-02.hcp.example.com";
/// The ingress class both control planes ask for, and the annotation
/// k0smotron's ingress guide tells its users to add for passthrough.
const CLASS: &str = "nginx";
const PASSTHROUGH: &str = "nginx.ingress.kubernetes.io/ssl-passthrough";
/// The workload cluster's cloud-controller-manager Deployment (the
/// OpenStack one k0rdent's hosted-control-plane template deploys).
const CCM: &str = "openstack-cloud-controller-manager";
/// controller-runtime's webhook port, which k0smotron's manager has no flag
/// for: one k0smotron at a time on this machine.
const WEBHOOK_PORT: u16 = 9443;

/// A k0smotron release these tests run, and what differs between them.
struct Release {
    /// Its name for hack/consumers/build.sh.
    consumer: &'static str,
    /// The version its K0smotronControlPlane and k0smotron Cluster are
    /// stored in: what its controllers write and hcp-ingress reads.
    api: &'static str,
    /// The other served version a user may still write, and whether the
    /// API server reaches it through k0smotron's conversion webhook
    /// (`false`: not served, compared by relabelling the object).
    other_api: (&'static str, bool),
    /// The k0s version of its control planes.
    k0s: &'static str,
    /// Whether it ships its own konnectivity agent for that k0s version
    /// (ConfigMap `kmc-<cluster>-ingress-konnectivity`).
    ships_konnectivity_agent: bool,
    /// Its webhook configuration files under `webhook/`.
    webhooks: &'static [&'static str],
    /// Whether its objects take `spec.patches` (`v1beta2`), which the
    /// take-over of its node proxy asks the user to set.
    patches: bool,
}

impl Release {
    fn bin(&self) -> PathBuf {
        bin_dir(self.consumer)
    }
}

/// k0smotron v1: the first k0s release its webhook accepts with an ingress,
/// for which it ships its own konnectivity agent.
const V1: Release = Release {
    consumer: "k0smotron",
    api: "v1beta1",
    other_api: ("v1beta2", false),
    k0s: "v1.34.1-k0s.0",
    ships_konnectivity_agent: true,
    webhooks: &["standalone", "capi"],
    patches: false,
};

/// k0smotron v2 on a k0s release whose own konnectivity agent honours
/// `spec.konnectivity.externalAddress` (k0smotron's
/// `HasNativeIngressKonnectivity`): k0s deploys the agent, k0smotron does not.
const V2: Release = Release {
    consumer: "k0smotron-v2",
    api: "v1beta2",
    other_api: ("v1beta1", true),
    k0s: "v1.35.1-k0s.0",
    ships_konnectivity_agent: false,
    webhooks: &["capi"],
    patches: true,
};

fn traefik_binary() -> PathBuf {
    bin_dir("traefik").join("traefik")
}

/// The release's own CRDs (they replace the files of ../shared/schemas for
/// the same kinds), and CAPI's Machine, which its K0sControlPlane
/// controller watches.
fn k0smotron_crds(release: &Release) -> Vec<PathBuf> {
    let mut paths: Vec<_> = std::fs::read_dir(release.bin().join("crds"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}

fn can_run(release: &Release) -> bool {
    let bin = release.bin();
    let mut files = vec![
        (bin.join("k0smotron"), HOW_TO_BUILD),
        (
            bin.join("crds/cluster.x-k8s.io_machines.yaml"),
            HOW_TO_BUILD,
        ),
        (traefik_binary(), HOW_TO_BUILD),
    ];
    for file in release.webhooks {
        files.push((bin.join(format!("webhook/{file}.yaml")), HOW_TO_BUILD));
    }
    ready(&[], &files)
}

/// k0smotron's manager, its webhooks served on loopback with the test's
/// certificate (a cluster would use a Service and cert-manager).
struct K0smotron {
    process: Process,
    /// Held while the manager runs: its webhook port is fixed.
    _port: std::fs::File,
}

impl K0smotron {
    async fn start(bed: &Bed, release: &Release) -> K0smotron {
        let lock = std::env::temp_dir().join("hcp-ingress-k0smotron-webhook-port.lock");
        let file = std::fs::File::create(lock).unwrap();
        eventually(
            "the k0smotron webhook port (another k0smotron test holds it)",
            || async { file.try_lock().ok() },
        )
        .await;

        // controller-runtime reads the serving certificate from
        // $TMPDIR/k8s-webhook-server/serving-certs.
        let tmp = bed.dir.path().join("k0smotron-tmp");
        let certs = tmp.join("k8s-webhook-server/serving-certs");
        std::fs::create_dir_all(&certs).unwrap();
        let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let ca = key.cert.pem();
        std::fs::write(certs.join("tls.crt"), &ca).unwrap();
        std::fs::write(certs.join("tls.key"), key.signing_key.serialize_pem()).unwrap();

        let health = free_port();
        let process = Process::spawn_with_env(
            &release.bin().join("k0smotron"),
            &[
                format!("--kubeconfig={}", bed.consumer_kubeconfig().display()),
                // What k0smotron's control-plane provider runs: the
                // K0smotronControlPlane and k0smotron Cluster controllers.
                "--enable-controller=control-plane".into(),
                format!("--health-probe-bind-address=127.0.0.1:{health}"),
                "--metrics-bind-address=0".into(),
            ],
            &[("TMPDIR", &tmp)],
            bed.dir.path(),
            bed.dir.path().join("k0smotron.log"),
        );
        // Ready when /readyz says so: its webhook check passes once the
        // webhook server serves.
        let k0smotron = K0smotron {
            process,
            _port: file,
        };
        eventually("k0smotron's /readyz", || async {
            assert!(
                k0smotron.process.running(),
                "k0smotron exited; its log ends with:\n{}",
                k0smotron.process.tail()
            );
            let ready = http_get(SocketAddr::from(([127, 0, 0, 1], health)), "/readyz");
            (ready.map(|(status, _)| status) == Some(200)).then_some(())
        })
        .await;
        point_webhooks_at(&bed.client, release, ca.as_bytes()).await;
        k0smotron
    }
}

/// k0smotron's webhook configurations, and the conversion webhooks its
/// release patches into its CRDs, as its release installs them, with the
/// API server sent to the manager's port on loopback.
async fn point_webhooks_at(client: &Client, release: &Release, ca: &[u8]) {
    let bundle = serde_json::to_value(ByteString(ca.to_vec())).unwrap();
    let conversions = std::fs::read_dir(release.bin().join("conversion"))
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    for path in conversions {
        let patch: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut conversion = patch["spec"]["conversion"].clone();
        let url_path = conversion["webhook"]["clientConfig"]["service"]["path"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no conversion webhook path", path.display()))
            .to_string();
        conversion["webhook"]["clientConfig"] = json!({
            "url": format!("https://127.0.0.1:{WEBHOOK_PORT}{url_path}"),
            "caBundle": bundle,
        });
        let name = patch["metadata"]["name"].as_str().unwrap();
        crds.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"conversion": conversion}})),
        )
        .await
        .unwrap_or_else(|e| panic!("CRD {name}'s conversion webhook: {e}"));
    }
    for file in release.webhooks {
        let path = release.bin().join(format!("webhook/{file}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        for mut config in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            if config.is_null() {
                continue;
            }
            // Both files name their configurations alike; kustomize
            // prefixes them when k0smotron is installed.
            let name = format!(
                "k0smotron-{file}-{}",
                config["metadata"]["name"].as_str().unwrap()
            );
            config["metadata"] = json!({"name": name});
            for hook in config["webhooks"].as_array_mut().unwrap() {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap()
                    .to_string();
                hook["clientConfig"] = json!({
                    "url": format!("https://127.0.0.1:{WEBHOOK_PORT}{path}"),
                    "caBundle": bundle,
                });
            }
            apply(client, config, "k0smotron-install").await;
        }
    }
}

/// Traefik's ingress-nginx provider as the shared ingress: it serves class
/// `nginx`, passes TLS through on the annotation, and reports its address
/// in each Ingress it admits (`publishStatusAddress`, as ingress-nginx's
/// `--publish-status-address`).
fn start_traefik(bed: &Bed) -> (Process, SocketAddr) {
    let (endpoint, token, ca) = bed.consumer_credentials();
    let port = free_port();
    let config = json!({
        "global": {"checkNewVersion": false, "sendAnonymousUsage": false},
        "entryPoints": {"websecure": {"address": format!("127.0.0.1:{port}")}},
        "providers": {"kubernetesIngressNGINX": {
            "httpsEntryPoint": "websecure",
            "publishStatusAddress": ["127.0.0.1"],
            "endpoint": endpoint, "token": token, "certAuthFilePath": ca}},
        "log": {"level": "DEBUG"},
    });
    let path = bed.dir.path().join("traefik.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let process = Process::spawn(
        &traefik_binary(),
        &[format!("--configFile={}", path.display())],
        bed.dir.path(),
        bed.dir.path().join("traefik.log"),
    );
    (process, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn capi_clusters(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    Api::namespaced_with(client.clone(), NS, &ApiResource::from_gvk(&gvk))
}

fn k0smotron_control_planes(client: &Client, api: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "controlplane.cluster.x-k8s.io",
        api,
        "K0smotronControlPlane",
    );
    Api::namespaced_with(client.clone(), NS, &ApiResource::from_gvk(&gvk))
}

/// A CAPI Cluster and its K0smotronControlPlane `<cluster>-cp` (the
/// release's stored version) with `ingress`, owned and labelled as CAPI's
/// Cluster controller leaves a control plane it references.
async fn create_cluster(
    client: &Client,
    release: &Release,
    cluster: &str,
    ingress: Value,
) -> DynamicObject {
    apply(
        client,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": cluster, "namespace": NS},
               "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                                            "kind": "K0smotronControlPlane", "name": format!("{cluster}-cp")}}}),
        "capi",
    )
    .await;
    let uid = capi_clusters(client)
        .get(cluster)
        .await
        .unwrap()
        .uid()
        .unwrap();
    apply(
        client,
        json!({"apiVersion": format!("controlplane.cluster.x-k8s.io/{}", release.api), "kind": "K0smotronControlPlane",
               "metadata": {"name": format!("{cluster}-cp"), "namespace": NS,
                            "labels": {CLUSTER_NAME_LABEL: cluster},
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                                 "name": cluster, "uid": uid}]},
               "spec": {"version": release.k0s,
                        "service": {"type": "ClusterIP", "apiPort": API_PORT, "konnectivityPort": KONNECTIVITY_PORT},
                        "ingress": ingress}}),
        "user",
    )
    .await;
    k0smotron_control_planes(client, release.api)
        .get(&format!("{cluster}-cp"))
        .await
        .unwrap()
}

/// The ControlPlaneIngresses of CAPI Cluster `cluster`.
async fn control_plane_ingresses(client: &Client, cluster: &str) -> Vec<ControlPlaneIngress> {
    Api::<ControlPlaneIngress>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster}")))
        .await
        .unwrap()
        .items
}

/// Wait until ControlPlaneIngress `name` has `type_` = `status` for its
/// current generation; (reason, message).
async fn condition(client: &Client, name: &str, type_: &str, status: &str) -> (String, String) {
    let api: Api<ControlPlaneIngress> = Api::namespaced(client.clone(), NS);
    eventually(&format!("{name} {type_}={status}"), || async {
        let cpi = api.get_opt(name).await.ok().flatten()?;
        let status_ = cpi.status.as_ref()?;
        if status_.observed_generation != cpi.metadata.generation {
            return None;
        }
        status_
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| (c.reason.clone(), c.message.clone()))
    })
    .await
}

/// Every route object hcp-ingress wrote in the namespace: controlled by a
/// ControlPlaneIngress, or with fields of its field manager.
async fn routes_of_hcp_ingress(client: &Client) -> Vec<String> {
    let mut found = Vec::new();
    for kind in [
        RouteKind::Ingress,
        RouteKind::IngressRouteTcp,
        RouteKind::TlsRoute,
    ] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NS, &kind.api_resource());
        for object in api.list(&ListParams::default()).await.unwrap() {
            let ours = object
                .owner_references()
                .iter()
                .any(|o| o.kind == "ControlPlaneIngress")
                || object
                    .managed_fields()
                    .iter()
                    .any(|f| f.manager.as_deref() == Some(MANAGER));
            if ours {
                found.push(format!("{kind:?} {}", object.name_any()));
            }
        }
    }
    found
}

/// The doctor's check of the route object `name`.
async fn doctor_route_check(client: &Client, cpi: &str, name: &str) -> Check {
    doctor_row(
        client,
        cpi,
        &format!("route Ingress {name}"),
        Duration::from_secs(1),
    )
    .await
}

/// The CCM the workload cluster runs (the OpenStack one k0rdent's hosted
/// template deploys) and `<cluster>-kubeconfig`, which k0smotron writes
/// once its control plane pod answers (never, here) and CAPI's Cluster
/// reports initialized: the bed's tenant API server is that workload API.
async fn connect_workload(bed: &Bed, cluster: &str) {
    let tenant = bed.tenant.admin_client();
    let ccm = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": CCM, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "ccm"}}, "template": {"metadata": {"labels": {"app": "ccm"}},
            "spec": {"containers": [{"name": "ccm", "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.33.0",
                "args": ["--cloud-provider=openstack"]}]}}}});
    apply(&tenant, ccm, "helm").await;
    apply(
        &bed.client,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
               "metadata": {"name": format!("{cluster}-kubeconfig"), "namespace": NS,
                            "labels": {CLUSTER_NAME_LABEL: cluster}},
               "stringData": {"value": bed.tenant.kubeconfig_yaml()}}),
        "k0smotron",
    )
    .await;
    capi_clusters(&bed.client)
        .patch_status(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"initialization": {"controlPlaneInitialized": true}}})),
        )
        .await
        .unwrap();
}

/// The endpoints of k0smotron's Service: the bed's backends (its API
/// server and konnectivity stand-in), where the control plane's pod would
/// be if a kubelet ran it.
async fn point_service_at_bed(client: &Client, service: &str) {
    let slices: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
        )),
    );
    let bed = slices
        .get(&format!("{}-backends", crate::bed::CLUSTER))
        .await
        .unwrap();
    apply(
        client,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{service}-pod"), "namespace": NS,
                            "labels": {"kubernetes.io/service-name": service,
                                       "endpointslice.kubernetes.io/managed-by": "hcp-ingress-test"}},
               "addressType": "IPv4",
               "endpoints": bed.data["endpoints"],
               "ports": bed.data["ports"]}),
        "test",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k0smotron_routes_its_control_plane_and_hcp_ingress_adds_only_the_rest() {
    routes_its_control_plane_and_hcp_ingress_adds_only_the_rest(&V1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k0smotron_v2_routes_its_control_plane_and_hcp_ingress_adds_only_the_rest() {
    routes_its_control_plane_and_hcp_ingress_adds_only_the_rest(&V2).await;
}

async fn routes_its_control_plane_and_hcp_ingress_adds_only_the_rest(release: &Release) {
    if !can_run(release) {
        return;
    }
    let bed = Bed::start_with_own_crds(&k0smotron_crds(release)).await;
    let client = &bed.client;
    apply(
        client,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
               "metadata": {"name": CLASS}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
        "platform",
    )
    .await;
    let k0smotron = K0smotron::start(&bed, release).await;

    // 1. `spec.ingress` with k0smotron's default `deploy` (its webhook makes it true).
    let kcp = create_cluster(
        client,
        release,
        ROUTED,
        json!({"apiHost": API_HOST, "konnectivityHost": KONNECTIVITY_HOST, "port": 443,
               "className": CLASS, "annotations": {PASSTHROUGH: "true"}}),
    )
    .await;
    let kmc = format!("kmc-{ROUTED}");
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), NS);
    let upstream = eventually(&format!("k0smotron's Ingress {kmc}"), || async {
        assert!(
            k0smotron.process.running(),
            "k0smotron exited; its log ends with:\n{}",
            k0smotron.process.tail()
        );
        ingresses.get_opt(&kmc).await.ok().flatten()
    })
    .await;
    // It is k0smotron's: controlled by its k0smotron Cluster.
    let owner = upstream
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    assert!(
        owner.is_some_and(|o| o.kind == "Cluster"
            && o.api_version == format!("k0smotron.io/{}", release.api)
            && o.name == ROUTED),
        "{kmc} is not controlled by k0smotron Cluster {ROUTED}: {:?}",
        upstream.owner_references()
    );
    // The K0smotronControlPlane left `deploy` out; k0smotron's own webhook
    // defaulted it in the k0smotron Cluster (without the webhook k0smotron's
    // controller dereferences a nil `deploy`).
    let kmc_cluster = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "k0smotron.io",
            release.api,
            "Cluster",
        )),
    )
    .get(ROUTED)
    .await
    .unwrap();
    assert_eq!(kmc_cluster.data["spec"]["ingress"]["deploy"], json!(true));
    // Its workload manifests (node proxy, steering, and the konnectivity
    // agent where k0s does not deploy it), under the names
    // docs/ownership.md (section 2.1) gives them.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let agent = format!("{kmc}-ingress-konnectivity");
    assert!(
        configmaps
            .get_opt(&format!("{kmc}-ingress"))
            .await
            .unwrap()
            .is_some(),
        "k0smotron made its Ingress but not ConfigMap {kmc}-ingress"
    );
    assert_eq!(
        configmaps.get_opt(&agent).await.unwrap().is_some(),
        release.ships_konnectivity_agent,
        "ConfigMap {agent} (its konnectivity agent) for k0s {}",
        release.k0s
    );
    point_service_at_bed(client, &kmc).await;
    connect_workload(&bed, ROUTED).await;

    // One ControlPlaneIngress for the cluster: the K0smotronControlPlane's,
    // not one more for the k0smotron Cluster it made.
    let cpi_name = format!("{ROUTED}-cp");
    let (reason, message) = condition(client, &cpi_name, "RouteReady", "True").await;
    assert_eq!(reason, "ManagedByUpstream", "{message}");
    assert!(
        message.contains(&format!("Ingress {NS}/{kmc}"))
            && message.contains("no ingress controller has published an address"),
        "{message}"
    );
    let cpis = control_plane_ingresses(client, ROUTED).await;
    assert_eq!(
        cpis.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        vec![cpi_name.clone()],
        "one ControlPlaneIngress for Cluster {ROUTED}"
    );
    let cpi = &cpis[0];
    let source = cpi
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    assert!(
        source.is_some_and(|o| o.kind == "K0smotronControlPlane"
            && o.api_version == format!("controlplane.cluster.x-k8s.io/{}", release.api)
            && Some(&o.uid) == kcp.uid().as_ref()),
        "{cpi_name} is not derived from K0smotronControlPlane {cpi_name}: {:?}",
        cpi.owner_references()
    );
    let spec = &cpi.spec;
    assert_eq!(spec.backend.service_name, kmc, "the Service k0smotron made");
    assert_eq!(spec.backend.api_port, i32::from(API_PORT));
    let route = spec.upstream.as_ref().and_then(|u| u.route.as_ref());
    assert_eq!(
        route.map(|r| (r.kind.as_str(), r.name.as_str())),
        Some(("Ingress", kmc.as_str())),
        "spec.upstream.route names k0smotron's Ingress"
    );

    // The CCM override, in the workload cluster: k0smotron makes none.
    condition(client, &cpi_name, "CCMConfigured", "True").await;
    let deployments: Api<Deployment> = Api::namespaced(bed.tenant.admin_client(), "kube-system");
    let env: Vec<(String, Option<String>)> = deployments
        .get(CCM)
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value))
        .collect();
    for (name, value) in [
        ("KUBERNETES_SERVICE_HOST", API_HOST),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ] {
        assert!(
            env.contains(&(name.to_string(), Some(value.to_string()))),
            "the CCM's env lacks {name}={value}: {env:?}"
        );
    }

    // Until an ingress controller admits k0smotron's Ingress the doctor
    // says so; then the shared ingress (started only now) admits it and
    // passes the tenant's TLS through it, and the doctor reports where.
    let check = doctor_route_check(client, &cpi_name, &kmc).await;
    assert!(
        check.verdict == Verdict::Fail && check.detail.contains("not admitted"),
        "{check:?}"
    );
    let (traefik, traefik_addr) = start_traefik(&bed);
    assert_passthrough(&bed, traefik_addr, &traefik).await;
    let check = eventually(&format!("the doctor's verdict on {kmc}"), || async {
        let check = doctor_route_check(client, &cpi_name, &kmc).await;
        (check.verdict == Verdict::Pass).then_some(check)
    })
    .await;
    assert!(
        check.detail.contains("admitted, ingress at 127.0.0.1"),
        "{}",
        check.detail
    );
    // And the ControlPlaneIngress's own status says it too.
    eventually("RouteReady reports the admission", || async {
        let (_, message) = condition(client, &cpi_name, "RouteReady", "True").await;
        message
            .contains("admitted by the ingress controller at 127.0.0.1")
            .then_some(())
    })
    .await;

    // 2. `deploy: false`: k0smotron still reconciles the ingress step (its
    // ConfigMaps) but makes no Ingress; hcp-ingress makes the route.
    create_cluster(
        client,
        release,
        MANUAL,
        json!({"apiHost": MANUAL_API_HOST, "konnectivityHost": MANUAL_KONNECTIVITY_HOST, "port": 443,
               "className": CLASS, "annotations": {PASSTHROUGH: "true"}, "deploy": false}),
    )
    .await;
    let manual_kmc = format!("kmc-{MANUAL}");
    eventually(
        &format!("k0smotron's ConfigMap {manual_kmc}-ingress"),
        || async {
            configmaps
                .get_opt(&format!("{manual_kmc}-ingress"))
                .await
                .ok()
                .flatten()
        },
    )
    .await;
    let manual_cpi = format!("{MANUAL}-cp");
    let (reason, message) = condition(client, &manual_cpi, "RouteReady", "True").await;
    assert_eq!(reason, "Applied", "{message}");
    let ours = format!("{ROUTE_PREFIX}{manual_cpi}");
    let route = ingresses.get(&ours).await.unwrap();
    let cpi = Api::<ControlPlaneIngress>::namespaced(client.clone(), NS)
        .get(&manual_cpi)
        .await
        .unwrap();
    assert!(
        route
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == cpi.uid().as_ref()),
        "Ingress {ours} is not controlled by ControlPlaneIngress {manual_cpi}"
    );
    assert_eq!(
        route
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref()),
        Some(CLASS)
    );
    assert!(
        ingresses.get_opt(&manual_kmc).await.unwrap().is_none(),
        "k0smotron made Ingress {manual_kmc} although told deploy: false"
    );

    // After all that, hcp-ingress wrote exactly one route: the one k0smotron was told to leave.
    assert_eq!(
        routes_of_hcp_ingress(client).await,
        vec![format!("Ingress {ours}")]
    );
    assert_eq!(control_plane_ingresses(client, ROUTED).await.len(), 1);

    // What hcp-ingress derived from the live object is what it derives
    // from the same object read at the other version: v2 serves v1beta1
    // through its own conversion webhook; v1 does not serve v1beta2, so
    // there the object is relabelled (the blocks we read have one schema).
    let (other, served) = release.other_api;
    let live = k0smotron_control_planes(client, release.api)
        .get(&cpi_name)
        .await
        .unwrap();
    let other_object = if served {
        let converted = k0smotron_control_planes(client, other)
            .get(&cpi_name)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{cpi_name} read at {other} (k0smotron's conversion webhook): {e}\n{}",
                    k0smotron.process.tail()
                )
            });
        assert_eq!(
            converted.types.as_ref().map(|t| t.api_version.as_str()),
            Some(format!("controlplane.cluster.x-k8s.io/{other}").as_str())
        );
        converted
    } else {
        as_version(&live, other)
    };
    let live_cpi = Api::<ControlPlaneIngress>::namespaced(client.clone(), NS)
        .get(&cpi_name)
        .await
        .unwrap();
    assert_eq!(
        derive(&other_object).expect("derives").spec,
        live_cpi.spec,
        "{cpi_name} read at {other}"
    );

    // 3. The first cluster switched to `deploy: false`: k0smotron has no
    // delete path for its Ingress, so `kmc-<cluster>` stays and still
    // routes the host. hcp-ingress, now asked to route, must not add a
    // second Ingress for that host: it reports the conflict instead.
    k0smotron_control_planes(client, release.api)
        .patch(
            &cpi_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ingress": {"deploy": false}}})),
        )
        .await
        .unwrap();
    let (reason, message) = condition(client, &cpi_name, "RouteReady", "False").await;
    assert_eq!(reason, "RouteConflict", "{message}");
    assert!(
        message.contains(&format!(
            "Ingress {NS}/{kmc} (controlled by Cluster {ROUTED}) already routes {API_HOST}"
        )),
        "{message}"
    );
    assert!(
        ingresses.get_opt(&kmc).await.unwrap().is_some(),
        "k0smotron deleted {kmc}"
    );
    assert_eq!(
        routes_of_hcp_ingress(client).await,
        vec![format!("Ingress {ours}")],
        "a second route for {API_HOST}"
    );

    // 4. The take-over's last step, against k0smotron itself: the
    // `spec.patches` entry hcp-ingress tells the user to add (its
    // `TakeOverPending` message) removes from k0smotron's ingress
    // ConfigMap exactly the files k0smotron ships there (its node proxy,
    // the `kubernetes` Service it steers and the temporary Endpoints),
    // and k0s prunes what the ConfigMap no longer holds.
    if release.patches {
        let name = format!("{manual_kmc}-ingress");
        let shipped: BTreeSet<String> = configmaps
            .get(&name)
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .into_keys()
            .collect();
        let entries: Value = serde_json::from_str(
            K0SMOTRON_STOP_PATCH
                .strip_prefix("spec.patches: ")
                .expect("the stop patch is a spec.patches entry"),
        )
        .unwrap();
        let content: Value =
            serde_json::from_str(entries[0]["patch"]["content"].as_str().unwrap()).unwrap();
        let removed: BTreeSet<String> = content["data"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            shipped, removed,
            "the files of {name} (k0smotron {}) and those our stop patch removes",
            release.consumer
        );
        k0smotron_control_planes(client, release.api)
            .patch(
                &manual_cpi,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"patches": entries}})),
            )
            .await
            .unwrap_or_else(|e| panic!("spec.patches on K0smotronControlPlane {manual_cpi}: {e}"));
        eventually(&format!("k0smotron emptying {name}"), || async {
            let data = configmaps.get(&name).await.ok()?.data.unwrap_or_default();
            data.keys().all(|key| !removed.contains(key)).then_some(())
        })
        .await;
    }

    drop(traefik);
    drop(k0smotron);
    bed.finish().await;
}

/// `object` as `apiVersion` `<group>/<version>`, its fields unchanged:
/// what k0smotron v2 serves for an object written as v1beta1 (the blocks
/// hcp-ingress reads have one schema in both).
fn as_version(object: &DynamicObject, version: &str) -> DynamicObject {
    let mut object = object.clone();
    let types = object.types.as_mut().unwrap();
    let group = types.api_version.split('/').next().unwrap().to_string();
    types.api_version = format!("{group}/{version}");
    object
}

fn read_example(path: &Path) -> DynamicObject {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// k0smotron v1 (`v1beta1`, the last release on the Go module proxy) and v2
/// (`v1beta2`, ../shared/schemas) objects with the same fields derive the
/// same ControlPlaneIngress: the examples of templates/examples, read as
/// each version.
#[test]
fn k0smotron_v1beta1_and_v1beta2_objects_derive_the_same_control_plane_ingress() {
    for example in ["k0smotron-controlplane.yaml", "k0smotron-cluster.yaml"] {
        let v1beta2 = read_example(&repo().join("templates/examples").join(example));
        assert!(
            v1beta2
                .types
                .as_ref()
                .unwrap()
                .api_version
                .ends_with("/v1beta2")
        );
        let v1beta1 = as_version(&v1beta2, "v1beta1");
        let (new, old) = (derive(&v1beta2).unwrap(), derive(&v1beta1).unwrap());
        assert_eq!(old.spec, new.spec, "{example}");
        assert_eq!(old.metadata.name, new.metadata.name, "{example}");
        assert_eq!(old.metadata.labels, new.metadata.labels, "{example}");
    }
}
