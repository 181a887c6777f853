//! ClusterResourceSet delivery, end to end and read by Cluster API itself:
//! what `hcp-ingress render --as-clusterresourceset` prints, applied with
//! `kubectl apply` to a management cluster where the real Cluster API core
//! manager runs, reaches a second, real workload API server through Cluster
//! API's own ClusterResourceSet controller; the ClusterResourceSetBinding
//! says every resource was applied; and what landed is what the controller
//! itself would install for the same ControlPlaneIngress. Only the Cluster
//! the ClusterResourceSet names is served.

use std::{
    process::Stdio,
    time::{Duration, SystemTime},
};

use hcp_ingress::{
    api::ControlPlaneIngress,
    pki::{self, CertificateAuthority, Renewal},
    render::workload::{self, WorkloadInputs},
};
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::{
    capi::{Clusterctl, Management, root},
    harness::documents,
    hosted::{
        cluster_secrets, clusters, hosted_cluster, install_control_plane_crd, workload_cluster,
    },
    manager::CapiManager,
};

/// The fixture rendered: reencrypt mode with advertise-address steering, so
/// the ClusterResourceSet carries both a ConfigMap and a resource-set Secret
/// (the proxy's key) and overwrites the `kubernetes` Endpoints and
/// EndpointSlice the control plane provider wrote.
const FIXTURE: &str = "test/workload/fixtures/reencrypt-advertise-address.yaml";
/// The fixture's namespace, ControlPlaneIngress and `spec.clusterName`.
const NS: &str = "tenants";
const CLUSTER: &str = "tenant-01";
/// A second Cluster in the same namespace, labelled for its own
/// ClusterResourceSet: tenant-01's must never land on it.
const OTHER: &str = "tenant-02";
/// How long Cluster API gets to connect to the workload cluster and apply:
/// its ClusterCache retries a failed connection only every 30 s.
const APPLY_TIMEOUT: Duration = Duration::from_secs(150);

/// Cluster API's `addons.cluster.x-k8s.io/v1beta2` objects of the tenant namespace.
fn addons(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("addons.cluster.x-k8s.io", "v1beta2", kind);
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// The label docs/clusterresourceset.md tells the operator to put on the
/// Cluster, spelled out rather than taken from the code that renders the
/// selector: the two must agree.
const SELECTOR_LABEL: &str = "hcp-ingress.dev/resource-set";

/// `kubectl label cluster NAME hcp-ingress.dev/resource-set=NAME`, as the
/// documentation tells the operator (through Cluster API's webhooks).
async fn select(m: &Management, name: &str) {
    clusters(&m.client, NS, "v1beta2")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SELECTOR_LABEL: name}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("label Cluster {name}: {e}"));
}

/// The documented command: the CA read back from `<cluster>-ca`, then
/// `hcp-ingress render -f FILE --as-clusterresourceset --ca-cert --ca-key`,
/// the real binary. Returns what it prints: the objects, and its notes.
async fn render(m: &Management, dir: &std::path::Path) -> (String, String) {
    let ca: Secret = Api::namespaced(m.client.clone(), NS)
        .get(&format!("{CLUSTER}-ca"))
        .await
        .unwrap();
    let data = ca.data.unwrap();
    std::fs::write(dir.join("ca.crt"), &data["tls.crt"].0).unwrap();
    std::fs::write(dir.join("ca.key"), &data["tls.key"].0).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .args(["render", "--as-clusterresourceset", "-f"])
        .arg(root().join(FIXTURE))
        .arg("--ca-cert")
        .arg(dir.join("ca.crt"))
        .arg("--ca-key")
        .arg(dir.join("ca.key"))
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "render --as-clusterresourceset: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `kubectl apply -f -` against the management cluster, as an operator.
async fn kubectl_apply(m: &Management, text: &str) {
    let mut child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&m.kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "kubectl apply of the rendered ClusterResourceSet: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The ClusterResourceSetBinding of `CLUSTER`, once it records every
/// resource of the ClusterResourceSet `crs` as `applied: true`.
async fn wait_applied(m: &Management, capi: &CapiManager, crs: &Value) -> Value {
    let name = crs["metadata"]["name"].as_str().unwrap();
    let wanted: Vec<(String, String)> = crs["spec"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().into(),
                r["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    let bindings: Api<DynamicObject> = addons(
        &m.client,
        "ClusterResourceSetBinding",
        "clusterresourcesetbindings",
    );
    let sets: Api<DynamicObject> = addons(&m.client, "ClusterResourceSet", "clusterresourcesets");
    let deadline = tokio::time::Instant::now() + APPLY_TIMEOUT;
    loop {
        let binding = bindings.get_opt(CLUSTER).await.unwrap().map(|b| json!(b));
        let applied = |b: &Value| -> Vec<(String, String)> {
            b["spec"]["bindings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["clusterResourceSetName"] == name)
                .flat_map(|s| s["resources"].as_array().cloned().unwrap_or_default())
                .filter(|r| r["applied"] == true)
                .map(|r| {
                    (
                        r["kind"].as_str().unwrap().into(),
                        r["name"].as_str().unwrap().into(),
                    )
                })
                .collect()
        };
        if let Some(binding) = &binding
            && wanted.iter().all(|w| applied(binding).contains(w))
        {
            return binding.clone();
        }
        if tokio::time::Instant::now() > deadline {
            let set = sets.get_opt(name).await.ok().flatten().map(|s| json!(s));
            panic!(
                "ClusterResourceSetBinding {NS}/{CLUSTER} does not record {wanted:?} as applied after {APPLY_TIMEOUT:?}\n\
                 binding: {binding:#?}\nClusterResourceSet status: {:#?}\ncapi-manager:\n{}",
                set.map(|s| s["status"].clone()),
                capi.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the controller would install in this workload cluster for the same
/// ControlPlaneIngress, computed as it computes it (controller/workload.rs):
/// the pure render with inputs read from the live `kubernetes` Service, the
/// proxy image and cluster domain defaults (the Cluster names no service
/// domain), the CA of `<cluster>-ca`, and the serving certificate found in
/// the cluster, which the controller keeps as long as `pki::renewal_due`
/// says it is valid for these hosts and this CA (asserted here: else it
/// would mint another, and the two would replace each other's).
async fn controller_objects(
    cpi: &ControlPlaneIngress,
    workload: &realkube::Cluster,
    client: &Client,
) -> Vec<Value> {
    let spec = workload::proxy_spec(cpi);
    let kubernetes = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let mut inputs =
        workload::inputs_from_service(spec.steering, Some(&kubernetes), WorkloadInputs::default());
    let ca = CertificateAuthority::from_pem(workload.ca_pem(), workload.ca_key_pem()).unwrap();
    inputs.ca_cert_pem = Some(ca.cert_pem().to_string());

    let landed: Secret = Api::namespaced(client.clone(), workload::NAMESPACE)
        .get(workload::NAME)
        .await
        .expect("the ClusterResourceSet delivered the proxy's TLS Secret");
    let data = landed.data.unwrap_or_default();
    let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
    let tls = workload::ProxyTls {
        cert_pem: text("tls.crt"),
        key_pem: text("tls.key"),
    };
    assert!(
        pki::key_matches(&tls.cert_pem, &tls.key_pem),
        "the delivered tls.key is not the key of tls.crt"
    );
    let leaf_spec = workload::proxy_leaf_spec(cpi, &inputs, SystemTime::now()).unwrap();
    let renewal = pki::renewal_due(&tls.cert_pem, SystemTime::now(), &ca, &leaf_spec);
    assert!(
        matches!(renewal, Renewal::Valid { .. }),
        "the controller would replace the delivered certificate: {renewal:?}"
    );
    inputs.tls = Some(tls);

    workload::proxy(cpi, &inputs)
        .unwrap()
        .expect("the proxy is enabled")
        .to_dynamic()
        .unwrap()
        .iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect()
}

/// The live object of `expected`'s kind, namespace and name.
async fn live(client: &Client, expected: &Value) -> Option<Value> {
    let (group, version) = expected["apiVersion"]
        .as_str()
        .unwrap()
        .rsplit_once('/')
        .unwrap_or(("", "v1"));
    let kind = expected["kind"].as_str().unwrap();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        expected["metadata"]["namespace"].as_str().unwrap(),
        &resource,
    );
    api.get_opt(expected["metadata"]["name"].as_str().unwrap())
        .await
        .unwrap()
        .map(|o| json!(o))
}

/// Where `live` differs from `want`. Every field of `want` must be in `live`
/// with the same value (the API server adds defaults and its own metadata,
/// which no one set); lists match element by element and in length, and the
/// maps at `EXACT` match key for key: labels select and mark our objects,
/// and a ConfigMap's or Secret's extra key would be content the controller
/// never writes.
fn differences(want: &Value, live: &Value, path: &str, out: &mut Vec<String>) {
    const EXACT: [&str; 3] = [".metadata.labels", ".data", ".stringData"];
    match (want, live) {
        (Value::Object(w), Value::Object(l)) => {
            if EXACT.contains(&path) {
                for key in l.keys().filter(|k| !w.contains_key(*k)) {
                    out.push(format!("{path}.{key}: not written by the controller"));
                }
            }
            for (key, value) in w {
                match l.get(key) {
                    Some(found) => differences(value, found, &format!("{path}.{key}"), out),
                    None => out.push(format!("{path}.{key}: missing, want {value}")),
                }
            }
        }
        (Value::Array(w), Value::Array(l)) if w.len() == l.len() => {
            for (i, (w, l)) in w.iter().zip(l).enumerate() {
                differences(w, l, &format!("{path}[{i}]"), out);
            }
        }
        (w, l) if w == l => {}
        (w, l) => out.push(format!("{path}: {l}, want {w}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_applies_the_rendered_cluster_resource_set_and_it_installs_what_the_controller_would()
 {
    let clusterctl = Clusterctl::new();
    let m = Management::init("management", &clusterctl).await;
    let capi = CapiManager::start(&m).await;
    let workload = workload_cluster().await;
    let wc = workload.admin_client();

    m.namespace(NS).await;
    install_control_plane_crd(&m).await;
    cluster_secrets(&m.client, NS, CLUSTER, &workload).await;
    hosted_cluster(&m.client, NS, CLUSTER, json!({})).await;
    hosted_cluster(&m.client, NS, OTHER, json!({})).await;
    select(&m, OTHER).await;

    // The documented steps: render from the CA in <cluster>-ca, apply, label.
    let dir = tempfile::tempdir().unwrap();
    let (printed, notes) = render(&m, dir.path()).await;
    // The fixture's CCM override cannot travel in a ClusterResourceSet: the
    // operator is told what to set instead (nothing in the output does it).
    assert!(
        notes.contains("cannot patch the cloud-controller-manager")
            && notes.contains("KUBERNETES_SERVICE_HOST=api.tenant-01.example.com"),
        "{notes}"
    );
    let rendered = documents(&printed);
    let crs = rendered
        .iter()
        .find(|o| o["kind"] == "ClusterResourceSet")
        .expect("a ClusterResourceSet is printed")
        .clone();
    kubectl_apply(&m, &printed).await;
    select(&m, CLUSTER).await;

    let binding = wait_applied(&m, &capi, &crs).await;
    assert_eq!(
        binding["spec"]["clusterName"], CLUSTER,
        "the binding is for the labelled Cluster: {binding:#}"
    );
    // Cluster API applies a ClusterResourceSet to every Cluster it selects
    // in one pass: by now a binding for the other Cluster would exist.
    let bindings: Api<DynamicObject> = addons(
        &m.client,
        "ClusterResourceSetBinding",
        "clusterresourcesetbindings",
    );
    assert!(
        bindings.get_opt(OTHER).await.unwrap().is_none(),
        "the ClusterResourceSet of {CLUSTER} reached Cluster {OTHER}"
    );

    // What landed is what the controller would install, object for object.
    let cpi: ControlPlaneIngress = serde_json::from_value(
        documents(&std::fs::read_to_string(root().join(FIXTURE)).unwrap())[0].clone(),
    )
    .unwrap();
    let expected = controller_objects(&cpi, &workload, &wc).await;
    let kinds: Vec<&str> = expected
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Secret",
            "DaemonSet",
            "EndpointSlice",
            "Endpoints"
        ]
    );
    let mut report = Vec::new();
    for want in &expected {
        let what = format!(
            "{} {}/{}",
            want["kind"].as_str().unwrap(),
            want["metadata"]["namespace"].as_str().unwrap(),
            want["metadata"]["name"].as_str().unwrap()
        );
        let Some(found) = live(&wc, want).await else {
            report.push(format!("{what}: not in the workload cluster"));
            continue;
        };
        let mut diffs = Vec::new();
        let mut want = want.clone();
        // Identity and server-set metadata are the API server's, not content.
        let meta = want["metadata"].as_object_mut().unwrap();
        meta.retain(|k, _| k == "labels" || k == "annotations");
        differences(&want, &found, "", &mut diffs);
        report.extend(diffs.into_iter().map(|d| format!("{what}: {d}")));
    }
    assert!(
        report.is_empty(),
        "what the ClusterResourceSet installed differs from what the controller installs:\n{}",
        report.join("\n")
    );
}
