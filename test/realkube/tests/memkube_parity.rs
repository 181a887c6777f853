//! memkube answers as a real API server does where they once differed: the
//! same requests against both, the same status codes. memkube stays the
//! server for injected faults, so what it accepts must be what Kubernetes
//! accepts.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
};
use serde_json::{Value, json};

/// The status code of each probe, in order (200/201 for success).
async fn probe(client: Client) -> Vec<(String, u16)> {
    let post = PostParams::default();
    let code = |r: Result<(), kube::Error>| match r {
        Ok(()) => 201,
        Err(kube::Error::Api(e)) => e.code,
        Err(other) => panic!("{other}"),
    };
    let mut out = Vec::new();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, value) in [
        ("slash", "hcp-ingress.dev/controller"),
        ("dots", "controller.hcp-ingress.dev"),
    ] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"endpointslice.kubernetes.io/managed-by": value}}}))
        .unwrap();
        out.push((
            format!("label value {value}"),
            code(cms.create(&post, &cm).await.map(drop)),
        ));
    }
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    for (name, bytes) in [("note-1024", 1024), ("note-1025", 1025)] {
        let event: DynamicObject = serde_json::from_value(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "test", "reportingInstance": "test", "action": "Test", "reason": "Test",
            "note": "n".repeat(bytes), "type": "Normal",
            "regarding": {"kind": "ConfigMap", "name": "x", "namespace": "default"}}))
        .unwrap();
        out.push((
            format!("event {name}"),
            code(events.create(&post, &event).await.map(drop)),
        ));
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let tls: Secret = serde_json::from_value(
        json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "c"}}),
    )
    .unwrap();
    out.push((
        "tls Secret without tls.key".into(),
        code(secrets.create(&post, &tls).await.map(drop)),
    ));
    let text = client
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let list: Value = serde_json::from_str(&text).unwrap();
    let typed_items = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i.get("kind").is_some());
    out.push((
        "list items carry kind".into(),
        if typed_items { 1 } else { 0 },
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memkube_rejects_and_lists_as_a_real_api_server_does() {
    let real = realkube::Cluster::start(realkube::Options::default())
        .await
        .unwrap();
    let mem = memkube::TestApi::start().await;
    let from_real = probe(real.admin_client()).await;
    let from_mem = probe(mem.client()).await;
    assert_eq!(from_mem, from_real);
    // And what the real server answers is what the controller must live with.
    assert_eq!(
        from_real,
        vec![
            ("label value hcp-ingress.dev/controller".to_string(), 422),
            ("label value controller.hcp-ingress.dev".to_string(), 201),
            ("event note-1024".to_string(), 201),
            ("event note-1025".to_string(), 422),
            ("tls Secret without tls.key".to_string(), 422),
            ("list items carry kind".to_string(), 0),
        ]
    );
}
