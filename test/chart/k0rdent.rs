//! The k0rdent ClusterTemplate piece (`templates/k0rdent/hcp-ingress`),
//! linted and rendered by helm: every ControlPlaneIngress it renders is valid
//! against the CRD (schema and CEL rules). Its values and schema are checked
//! without helm by `cargo test --test release`.

use crate::{helm, root, run_helm, template_chart};

#[test]
fn k0rdent_piece_lints_and_renders_valid_controlplaneingresses() {
    let Some(helm) = helm() else { return };
    let chart = root().join("templates/k0rdent/hcp-ingress");
    let crd = crdschema::Crd::from_yaml(&hcp_ingress::cli::crd_yaml()).expect("our CRD loads");
    let mut values: Vec<String> = std::fs::read_dir(chart.join("ci"))
        .unwrap()
        .map(|e| format!("ci/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    values.sort();
    let mut rendered = 0;
    for file in &values {
        let path = chart.join(file).display().to_string();
        let dir = chart.display().to_string();
        let (ok, out, err) = run_helm(&helm, &["lint", "--strict", &dir, "--values", &path]);
        assert!(ok, "helm lint --strict --values {file}:\n{out}{err}");
        let objects = template_chart(&helm, &chart, "tenant-12", "kcm-system", &[file], &[])
            .unwrap_or_else(|e| panic!("helm template --values {file}: {e}"));
        for cpi in objects
            .iter()
            .filter(|o| o["kind"] == "ControlPlaneIngress")
        {
            if let Err(violations) = crd.validate(cpi) {
                panic!(
                    "{file}: the rendered ControlPlaneIngress is invalid: {violations:#?}\n{cpi:#}"
                );
            }
            assert_eq!(cpi["metadata"]["namespace"], "kcm-system", "{file}");
            rendered += 1;
        }
    }
    assert!(
        rendered > 0,
        "no ci/ values file of the k0rdent piece renders a ControlPlaneIngress: {values:?}"
    );
}
