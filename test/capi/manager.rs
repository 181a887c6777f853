//! The Cluster API core manager, run as a process beside a management
//! cluster's API server.

use std::{process::Command, time::Duration};

use k8s_openapi::{
    ByteString, apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    },
};
use serde_json::{Value, json};

use crate::{
    capi::{Clusterctl, Management, PROVIDER_LABEL, Process, capi_dir, free_port, http_status},
    harness::eventually,
    hosted::{clusters, hosted_cluster, install_control_plane_crd},
};

/// The Cluster API core manager on one management cluster: its controllers
/// (Cluster, ClusterResourceSet, ...) and its webhooks, which every Cluster
/// API object passes on create and update. The API server reaches the
/// webhooks on loopback: their configurations and the CRDs' conversion
/// webhooks are pointed at the process by URL, with the test's serving
/// certificate, where a cluster would use the Service and cert-manager.
pub struct CapiManager {
    process: Process,
    _certs: tempfile::TempDir,
}

impl CapiManager {
    pub async fn start(m: &Management) -> CapiManager {
        let certs = tempfile::tempdir().expect("temp dir");
        let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("serving certificate");
        let ca = key.cert.pem();
        std::fs::write(certs.path().join("tls.crt"), &ca).unwrap();
        std::fs::write(
            certs.path().join("tls.key"),
            key.signing_key.serialize_pem(),
        )
        .unwrap();
        let port = free_port();
        point_webhooks_at(
            &m.client,
            &format!("https://127.0.0.1:{port}"),
            ca.as_bytes(),
        )
        .await;
        let health = free_port();
        let mut cmd = Command::new(capi_dir().join("bin/capi-manager"));
        cmd.arg(format!("--kubeconfig={}", m.kubeconfig.display()))
            .arg(format!("--webhook-port={port}"))
            .arg(format!("--webhook-cert-dir={}", certs.path().display()))
            .arg(format!("--health-addr=127.0.0.1:{health}"))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()))
            .arg("--insecure-diagnostics=true");
        let mut process = Process::spawn(cmd, m.cluster.dir().join("capi-manager.log"));
        // Ready when /readyz says so: its one check is that the webhook
        // server started, TLS handshake with the test's certificate included
        // (a bare TCP connect would only see the port bound).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while http_status(health, "/readyz").await != Some(200) {
            if let Some(status) = process.exited() {
                panic!("capi-manager ended ({status}):\n{}", process.log_tail(30));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "capi-manager is not ready after 60 s:\n{}",
                process.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        CapiManager {
            process,
            _certs: certs,
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}

/// Point Cluster API's admission webhooks and CRD conversion webhooks at `url`.
async fn point_webhooks_at(client: &Client, url: &str, ca: &[u8]) {
    let selector = ListParams::default().labels(&format!("{PROVIDER_LABEL}=cluster-api"));
    let bundle = serde_json::to_value(ByteString(ca.to_vec())).unwrap();
    let patch = |hooks: Value| -> Value {
        let hooks: Vec<Value> = hooks
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut hook| {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or("/")
                    .to_string();
                hook["clientConfig"] = json!({"url": format!("{url}{path}"), "caBundle": bundle});
                hook
            })
            .collect();
        json!({"webhooks": hooks})
    };
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        for config in api.list(&selector).await.unwrap() {
            let hooks = config.data["webhooks"].clone();
            api.patch(
                &config.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch(hooks)),
            )
            .await
            .unwrap();
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds.list(&selector).await.unwrap() {
        let converts = crd
            .spec
            .conversion
            .as_ref()
            .is_some_and(|c| c.strategy == "Webhook");
        if converts {
            // ConversionReview v1 only, as upstream's CRDs say: controller-runtime
            // serves no other version.
            let conversion = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": format!("{url}/convert"), "caBundle": bundle,
                    // A merge patch merges clientConfig: the Service must go.
                    "service": null}}}}});
            crds.patch(
                crd.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(conversion),
            )
            .await
            .unwrap();
        }
    }
}

/// What the other tests rely on: the API server reaches the manager's
/// webhooks (a Cluster it refuses is refused by the webhook, a valid one is
/// created and updated through them), the CRDs' conversion webhook serves
/// the older version, and the controllers reconcile (the Cluster's
/// infrastructure is marked provisioned, which ClusterCache needs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capi_manager_serves_webhooks_conversion_and_controllers_to_a_real_api_server() {
    let clusterctl = Clusterctl::new();
    let m = Management::init("management", &clusterctl).await;
    let capi = CapiManager::start(&m).await;
    install_control_plane_crd(&m).await;
    let ns = "tenants";
    m.namespace(ns).await;
    let v1beta2 = clusters(&m.client, ns, "v1beta2");

    let refused = v1beta2
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "nothing", "namespace": ns}, "spec": {"paused": false}}),
            )
            .unwrap(),
        )
        .await
        .expect_err("a Cluster without a control plane, infrastructure or topology");
    assert!(
        refused
            .to_string()
            .contains("validation.cluster.cluster.x-k8s.io"),
        "refused by something else than Cluster API's webhook: {refused}\n{}",
        capi.log_tail(20)
    );

    hosted_cluster(&m.client, ns, "wl", json!({})).await;
    v1beta2
        .patch(
            "wl",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/updated": "yes"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("update through the webhooks: {e}\n{}", capi.log_tail(20)));

    let old = clusters(&m.client, ns, "v1beta1")
        .get("wl")
        .await
        .unwrap_or_else(|e| {
            panic!(
                "Cluster at v1beta1 (conversion): {e}\n{}",
                capi.log_tail(20)
            )
        });
    let old = serde_json::to_value(old).unwrap();
    assert_eq!(old["apiVersion"], "cluster.x-k8s.io/v1beta1");
    assert_eq!(
        old["spec"]["controlPlaneRef"]["kind"], "K0smotronControlPlane",
        "{old:#}"
    );
    assert_eq!(old["metadata"]["labels"]["example.com/updated"], "yes");

    eventually(
        "the Cluster's infrastructure is marked provisioned",
        || async {
            let cluster = serde_json::to_value(v1beta2.get("wl").await.ok()?).ok()?;
            (cluster["status"]["initialization"]["infrastructureProvisioned"] == true).then_some(())
        },
    )
    .await;
}
