//! The DaemonSet's security properties, asserted one by one rather than only
//! through the golden text.

use serde_json::{Value, json};

use crate::{fixture, object, render};

fn pod(input: &str) -> Value {
    let rendered = render(&fixture(input), false);
    object(&rendered, "DaemonSet", "hcp-ingress-proxy")["spec"]["template"]["spec"].clone()
}

#[test]
fn no_api_credentials_and_no_service_links() {
    for input in [
        "reencrypt-advertise-address.yaml",
        "service-steering.yaml",
        "proxy-protocol.yaml",
    ] {
        let pod = pod(input);
        assert_eq!(pod["automountServiceAccountToken"], false, "{input}");
        assert_eq!(pod["enableServiceLinks"], false, "{input}");
        assert!(pod["serviceAccountName"].is_null(), "{input}");
    }
}

#[test]
fn capabilities_exactly_as_intended() {
    let caps = |input: &str| pod(input)["containers"][0]["securityContext"]["capabilities"].clone();
    // Advertise address on port 443: the address on lo, and a low port.
    assert_eq!(
        caps("reencrypt-advertise-address.yaml"),
        json!({"drop": ["ALL"], "add": ["NET_ADMIN", "NET_BIND_SERVICE"]})
    );
    assert_eq!(
        caps("proxy-protocol.yaml"),
        json!({"drop": ["ALL"], "add": ["NET_ADMIN", "NET_BIND_SERVICE"]})
    );
    // Service steering on 6443: nothing at all (no empty `add` list, which
    // the API server drops), and not root.
    assert_eq!(caps("service-steering.yaml"), json!({"drop": ["ALL"]}));
    let sc = &pod("service-steering.yaml")["securityContext"];
    assert_eq!(
        (sc["runAsNonRoot"].clone(), sc["runAsUser"].clone()),
        (json!(true), json!(65532))
    );
}

#[test]
fn locked_down_container() {
    for input in ["reencrypt-advertise-address.yaml", "service-steering.yaml"] {
        let pod = pod(input);
        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{input}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{input}");
        assert_eq!(sc["privileged"], false, "{input}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{input}"
        );
        for mount in c["volumeMounts"].as_array().unwrap() {
            assert_eq!(mount["readOnly"], true, "{input}: {mount}");
            assert!(
                mount["subPath"].is_null(),
                "{input}: subPath mounts never update (no hot reload)"
            );
        }
        for volume in pod["volumes"].as_array().unwrap() {
            let mode = volume["configMap"]["defaultMode"]
                .as_i64()
                .or(volume["secret"]["defaultMode"].as_i64())
                .unwrap();
            assert!(mode == 0o400 || mode == 0o440, "{input}: {volume}");
            assert_eq!(mode & 0o004, 0, "{input}: world-readable {volume}");
        }
        assert!(
            c["resources"]["requests"]["cpu"].is_string()
                && c["resources"]["limits"]["memory"].is_string()
        );
    }
}

#[test]
fn runs_on_every_node_before_anything_else() {
    let pod = pod("reencrypt-advertise-address.yaml");
    assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    // The node's resolver: CoreDNS itself reaches the API through this proxy.
    assert_eq!(pod["dnsPolicy"], "Default");
}

#[test]
fn no_host_ports_so_a_surge_pod_fits_next_to_the_old_one() {
    // A hostNetwork pod's container ports are host ports, and the scheduler
    // never places two pods with one host port on a node: a rolling update
    // with maxSurge would stay Pending. The proxy shares its ports with
    // SO_REUSEPORT instead.
    for fixture in [
        "reencrypt-advertise-address.yaml",
        "service-steering.yaml",
        "proxy-protocol.yaml",
    ] {
        let pod = pod(fixture);
        assert!(
            pod["containers"][0].get("ports").is_none(),
            "{fixture}: {pod:#}"
        );
    }
    let ds = object(
        &render(&fixture("reencrypt-advertise-address.yaml"), false),
        "DaemonSet",
        "hcp-ingress-proxy",
    )
    .clone();
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0})
    );
}

#[test]
fn probes_hit_the_admin_port_on_loopback() {
    let pod = pod("reencrypt-advertise-address.yaml");
    let c = &pod["containers"][0];
    // Readiness names the pod template revision the process was started with:
    // during a surge the old pod shares the admin port and must not vouch.
    let revision = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "HCP_PROXY_REVISION")
        .and_then(|e| e["value"].as_str())
        .expect("the revision is passed to the proxy");
    let ready = format!("/readyz/{revision}");
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", ready.as_str()),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(
            (
                get["host"].as_str(),
                get["path"].as_str(),
                get["port"].as_i64()
            ),
            (Some("127.0.0.1"), Some(path), Some(9445))
        );
    }
}

#[test]
fn rolling_update_surges_so_no_node_is_ever_without_a_proxy() {
    let rendered = render(&fixture("reencrypt-advertise-address.yaml"), false);
    let ds = object(&rendered, "DaemonSet", "hcp-ingress-proxy");
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    );
}

#[test]
fn our_labels_on_ours_and_none_on_theirs() {
    for input in ["reencrypt-advertise-address.yaml", "service-steering.yaml"] {
        for obj in render(&fixture(input), false).objects {
            let labels = &obj["metadata"]["labels"];
            let ours = !(obj["kind"] == "Service" || obj["kind"] == "Deployment");
            assert_eq!(
                labels["app.kubernetes.io/managed-by"] == "hcp-ingress",
                ours,
                "{input}: {obj}"
            );
            assert_eq!(
                labels["app.kubernetes.io/name"] == "hcp-ingress-proxy",
                ours,
                "{input}: {obj}"
            );
        }
    }
}

#[test]
fn steering_objects() {
    let rendered = render(&fixture("reencrypt-advertise-address.yaml"), false);
    let endpoints = object(&rendered, "Endpoints", "kubernetes");
    assert_eq!(endpoints["metadata"]["namespace"], "default");
    assert_eq!(
        endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    assert_eq!(
        endpoints["subsets"],
        json!([{"addresses": [{"ip": "240.0.0.1"}], "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}])
    );
    let slice = object(&rendered, "EndpointSlice", "kubernetes");
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "controller.hcp-ingress.dev"
    );
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["240.0.0.1"]));
    assert_eq!(
        slice["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP"}])
    );

    let rendered = render(&fixture("service-steering.yaml"), false);
    let service = object(&rendered, "Service", "kubernetes");
    assert_eq!(
        service["spec"],
        json!({"selector": {"app.kubernetes.io/name": "hcp-ingress-proxy"}, "internalTrafficPolicy": "Local", "publishNotReadyAddresses": true})
    );
    assert!(
        rendered
            .objects
            .iter()
            .all(|o| o["kind"] != "Endpoints" && o["kind"] != "EndpointSlice")
    );
}
