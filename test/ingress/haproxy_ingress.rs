//! haproxy-ingress (jcmoraisjr/haproxy-ingress) reads our Ingress with its
//! `haproxy-ingress.github.io/ssl-passthrough` annotation and configures the
//! system's HAProxy (Debian 12: 2.6, with Lua 5.3 and `lua-json`) to pass
//! the tenant's TLS through by SNI.

use std::net::SocketAddr;

use hcp_ingress::render::{ROUTE_PREFIX, RouteKind};
use serde_json::json;

use crate::{
    bed::{Bed, CLUSTER, ready},
    consumers::{assert_passthrough, free_port, haproxy_ingress_files, start_haproxy_ingress},
    konnectivity::assert_agent_reaches_every_server,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_ingress_passes_tls_through_by_sni_with_our_ingress() {
    if !ready(&["haproxy"], &haproxy_ingress_files()) {
        return;
    }
    let bed = Bed::start(&[]).await;
    // Its frontends on loopback too, the HTTPS one on the port the test
    // calls.
    let https = free_port();
    let process = start_haproxy_ingress(
        &bed,
        json!({"https-port": https.to_string(), "http-port": free_port().to_string(),
               "bind-ip-addr-http": "127.0.0.1"}),
    )
    .await;

    bed.create_control_plane_ingress(
        Some("haproxy-ingress"),
        json!({"controller": "haproxy-ingress"}),
    )
    .await;
    bed.route_written_by_controller(RouteKind::Ingress, &format!("{ROUTE_PREFIX}{CLUSTER}"))
        .await;
    assert_passthrough(&bed, SocketAddr::from(([127, 0, 0, 1], https)), &process).await;
    assert_agent_reaches_every_server(&bed, SocketAddr::from(([127, 0, 0, 1], https)), &process)
        .await;
    let (reason, _) = bed.condition("RouteReady", "True").await;
    assert_eq!(reason, "Applied");
    drop(process);
    bed.finish().await;
}
