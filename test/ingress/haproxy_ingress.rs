//! haproxy-ingress (jcmoraisjr/haproxy-ingress) reads our Ingress with its
//! `haproxy-ingress.github.io/ssl-passthrough` annotation and configures the
//! system's HAProxy (Debian 12: 2.6, with Lua 5.3 and `lua-json`) to pass
//! the tenant's TLS through by SNI.

use std::{net::SocketAddr, path::PathBuf};

use hcp_ingress::render::{ROUTE_PREFIX, RouteKind};
use serde_json::json;

use crate::{
    bed::{Bed, CLUSTER, apply, ready},
    consumers::{HOW_TO_BUILD, Process, assert_passthrough, bin_dir, free_port},
};

fn binary() -> PathBuf {
    bin_dir("haproxy-ingress").join("haproxy-ingress-controller")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_ingress_passes_tls_through_by_sni_with_our_ingress() {
    let bin = bin_dir("haproxy-ingress");
    // The image's start script copies the Lua files next to the config;
    // its `json` module comes from Debian's lua-json.
    if !ready(
        &["haproxy"],
        &[
            (binary(), HOW_TO_BUILD),
            (bin.join("rootfs/etc/lua/services.lua"), HOW_TO_BUILD),
            (
                PathBuf::from("/usr/share/lua/5.3/json.lua"),
                "the lua-json package: apt-get install lua-json",
            ),
        ],
    ) {
        return;
    }
    let bed = Bed::start(&[]).await;
    let client = &bed.client;
    apply(
        client,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
               "metadata": {"name": "haproxy-ingress"},
               "spec": {"controller": "haproxy-ingress.github.io/controller"}}),
        "platform",
    )
    .await;
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ingress"}}),
        "platform",
    )
    .await;
    // Every listener on loopback and on a free port: the defaults are 80,
    // 443, 1936 and 10253 on every address.
    let https = free_port();
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "haproxy-ingress", "namespace": "ingress"},
        "data": {
            "https-port": https.to_string(), "http-port": free_port().to_string(),
            "bind-ip-addr-http": "127.0.0.1", "bind-ip-addr-tcp": "127.0.0.1",
            "healthz-port": free_port().to_string(), "bind-ip-addr-healthz": "127.0.0.1",
            "stats-port": free_port().to_string(), "bind-ip-addr-stats": "127.0.0.1",
        }}),
        "platform",
    )
    .await;

    let prefix = bed.dir.path().join("fs");
    let lua = prefix.join("etc/haproxy/lua");
    std::fs::create_dir_all(&lua).unwrap();
    for entry in std::fs::read_dir(bin.join("rootfs/etc/lua"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(entry.path(), lua.join(entry.file_name())).unwrap();
    }
    // Templates are read from `rootfs/etc/templates` relative to the
    // working directory when a local filesystem prefix is set.
    let process = Process::spawn(
        &binary(),
        &[
            format!("--kubeconfig={}", bed.consumer_kubeconfig().display()),
            format!("--local-filesystem-prefix={}", prefix.display()),
            "--master-worker".into(),
            "--configmap=ingress/haproxy-ingress".into(),
            "--ingress-class=haproxy-ingress".into(),
            "--healthz-port=0".into(),
            format!("--healthz-addr=127.0.0.1:{}", free_port()),
            // Status and Gateway API need POD_NAMESPACE (an in-cluster
            // run); the Ingress path is what is under test.
            "--update-status=false".into(),
            "--watch-gateway=false".into(),
            "--v=2".into(),
        ],
        &bin,
        bed.dir.path().join("haproxy-ingress.log"),
    );

    bed.create_control_plane_ingress(
        Some("haproxy-ingress"),
        json!({"controller": "haproxy-ingress"}),
    )
    .await;
    bed.route_written_by_controller(RouteKind::Ingress, &format!("{ROUTE_PREFIX}{CLUSTER}"))
        .await;
    assert_passthrough(&bed, SocketAddr::from(([127, 0, 0, 1], https)), &process).await;
    let (reason, _) = bed.condition("RouteReady", "True").await;
    assert_eq!(reason, "Applied");
    drop(process);
    bed.finish().await;
}
