//! `render --workload` prints the endpoint `spec.kubeProxyReplacement`
//! publishes, as the controller writes it, and says what a
//! ClusterResourceSet leaves out.

use hcp_ingress::cli::render_workload_documents;
use serde_json::json;

use crate::{fixture, object, options};

/// The defaults' fixture with the opt-in.
fn with_opt_in() -> String {
    let text = std::fs::read_to_string(fixture("reencrypt-advertise-address.yaml")).unwrap();
    format!("{text}  kubeProxyReplacement: {{publishEndpoint: true}}\n")
}

#[test]
fn the_opt_in_prints_calicos_and_ciliums_config_maps_with_the_api_host_and_port() {
    let rendered = render_workload_documents("cpi.yaml", &with_opt_in(), &options(false)).unwrap();
    let calico = json!({"KUBERNETES_SERVICE_HOST": "api.tenant-01.example.com", "KUBERNETES_SERVICE_PORT": "443"});
    let found: Vec<(&str, &serde_json::Value)> = rendered
        .objects
        .iter()
        .filter(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["name"] == "kubernetes-services-endpoint"
        })
        .map(|o| (o["metadata"]["namespace"].as_str().unwrap(), &o["data"]))
        .collect();
    assert_eq!(
        found,
        [("kube-system", &calico), ("tigera-operator", &calico)]
    );
    let cilium = object(&rendered, "ConfigMap", "control-plane-endpoint");
    assert_eq!(cilium["metadata"]["namespace"], "kube-system");
    assert_eq!(
        cilium["data"],
        json!({"apiServerHost": "api.tenant-01.example.com", "apiServerPort": "443"})
    );
    assert!(
        rendered
            .notes
            .iter()
            .any(|n| n.contains("only once that namespace exists")),
        "{:?}",
        rendered.notes
    );

    // Without the opt-in: none of them.
    let text = std::fs::read_to_string(fixture("reencrypt-advertise-address.yaml")).unwrap();
    let plain = render_workload_documents("cpi.yaml", &text, &options(false)).unwrap();
    assert!(
        plain.objects.iter().all(|o| !o["metadata"]["name"]
            .as_str()
            .unwrap()
            .ends_with("endpoint")),
        "published without the opt-in"
    );
}

#[test]
fn a_cluster_resource_set_says_it_does_not_carry_the_endpoint() {
    let rendered = render_workload_documents("cpi.yaml", &with_opt_in(), &options(true)).unwrap();
    assert!(
        rendered
            .notes
            .iter()
            .any(|n| n.contains("does not carry the endpoint of spec.kubeProxyReplacement")),
        "{:?}",
        rendered.notes
    );
}
