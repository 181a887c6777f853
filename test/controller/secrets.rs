//! Secrets never reach the logs, conditions or Events: the controller runs
//! with every target at TRACE (kube, hyper, rustls included) through a
//! successful install and through Secrets broken in ways that make parsers
//! complain, and no byte of key material or token shows up anywhere an
//! operator (or a log shipper) can read.

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::{core::v1::Event as CoreEvent, core::v1::Secret, events::v1::Event};
use kube::{Api, api::ListParams};
use serde_json::{Value, json};
use tracing_subscriber::{EnvFilter, fmt::MakeWriter, util::SubscriberInitExt};

use crate::{
    harness::*,
    workload::{CA_CRT, CA_KEY, initialized_cluster, put_secret, workload_cluster},
};

const BROKEN_KEY_BODY: &str = "TOPSECRETCAKEMATERIALx0123456789abcdef";
const BROKEN_KUBECONFIG_TOKEN: &str = "TOPSECRETKUBECONFIGTOKENx0123456789";

/// Everything the subscriber writes, for inspection after the run.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn cpi(cluster: &str) -> Value {
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": cluster, "namespace": NS},
        "spec": {"clusterName": cluster, "ingress": {"apiHost": format!("api.{cluster}.example.com"), "className": "haproxy"},
                 "backend": {"serviceName": format!("kmc-{cluster}"), "apiPort": 30443},
                 "proxy": {"upstreams": ["192.0.2.10"]}}})
}

/// The lines of a PEM body: each one alone is secret material.
fn pem_body_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .map(str::to_string)
        .collect()
}

// One thread: the capturing subscriber is the thread's default, so every task
// of the controller and of both API servers logs into it.
#[tokio::test(flavor = "current_thread")]
async fn no_key_or_token_reaches_logs_conditions_or_events() {
    let captured = Captured::default();
    let _guard = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("trace"))
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish()
        .set_default();

    let m = management(&[]).await;
    let w = workload_cluster().await;
    // The token the workload API server issued for the `<cluster>-kubeconfig`.
    let kubeconfig = w.kubeconfig_yaml();
    let token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("the kubeconfig carries a token")
        .to_string();

    // "good": installs for real. "badca": its CA key does not parse.
    // "badkc": its kubeconfig does not parse.
    for name in ["good", "badca", "badkc"] {
        initialized_cluster(&m, name).await;
    }
    put_secret(
        &m.client,
        "good-kubeconfig",
        [("value", kubeconfig.clone())],
    )
    .await;
    put_secret(
        &m.client,
        "good-ca",
        [
            ("tls.crt", CA_CRT.to_string()),
            ("tls.key", CA_KEY.to_string()),
        ],
    )
    .await;
    put_secret(
        &m.client,
        "badca-kubeconfig",
        [("value", kubeconfig.clone())],
    )
    .await;
    let broken_key =
        format!("-----BEGIN PRIVATE KEY-----\n{BROKEN_KEY_BODY}\n-----END PRIVATE KEY-----\n");
    put_secret(
        &m.client,
        "badca-ca",
        [("tls.crt", CA_CRT.to_string()), ("tls.key", broken_key)],
    )
    .await;
    let broken_kubeconfig = format!(
        "apiVersion: v1\nusers:\n- name: x\n  user:\n    token: {BROKEN_KUBECONFIG_TOKEN}\n  clusters: [unclosed\n"
    );
    put_secret(
        &m.client,
        "badkc-kubeconfig",
        [("value", broken_kubeconfig)],
    )
    .await;

    let running = m.start();
    for name in ["good", "badca", "badkc"] {
        apply_value(&m.client, cpi(name)).await;
    }
    wait_condition(&m.client, "good", "WorkloadReachable", "True").await;
    let proxy_secrets = Api::<Secret>::namespaced(w.client(), "kube-system");
    let installed = eventually("the proxy Secret in the workload cluster", || async {
        proxy_secrets.get_opt("hcp-ingress-proxy").await.ok()?
    })
    .await;
    let (_, badca) = wait_condition(&m.client, "badca", "ProxyReady", "False").await;
    let (_, badkc) = wait_condition(&m.client, "badkc", "WorkloadReachable", "False").await;
    running.stop().await;

    // The leaf key the controller minted and installed is secret too.
    let leaf_key = String::from_utf8(installed.data.unwrap()["tls.key"].0.clone()).unwrap();

    let mut secrets = vec![
        token.clone(),
        BROKEN_KEY_BODY.to_string(),
        BROKEN_KUBECONFIG_TOKEN.to_string(),
    ];
    secrets.extend(pem_body_lines(CA_KEY));
    secrets.extend(pem_body_lines(&leaf_key));
    assert!(secrets.len() > 5, "the key fixtures have PEM bodies");

    // Where an operator reads: logs, every condition message, every Event.
    let logs = captured.text();
    assert!(
        logs.contains("TRACE") && logs.contains("badca"),
        "the capture works: trace output naming the clusters was recorded"
    );
    let mut places = vec![("logs".to_string(), logs)];
    for cpi in cpis(&m.client).list(&ListParams::default()).await.unwrap() {
        let status = serde_json::to_string(&cpi.status).unwrap();
        places.push((format!("status of {}", cpi.metadata.name.unwrap()), status));
    }
    let events: Api<Event> = Api::namespaced(m.client.clone(), NS);
    let core_events: Api<CoreEvent> = Api::namespaced(m.client.clone(), NS);
    let all_events = format!(
        "{}{}",
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap(),
        serde_json::to_string(
            &core_events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
        )
        .unwrap()
    );
    assert!(
        all_events.contains("badca"),
        "the failures were reported as Events"
    );
    places.push(("events".to_string(), all_events));

    for (place, text) in &places {
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "secret material {secret:?} found in {place}"
            );
        }
    }
    // The failures are still explained, by name, without their contents.
    assert!(badca.contains("badca-ca"), "{badca}");
    assert!(badkc.contains("badkc-kubeconfig"), "{badkc}");
}
