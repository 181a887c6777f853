//! Golden tests: every example and fixture renders exactly the committed
//! output. `UPDATE_GOLDEN=1 cargo test --test foundation golden` rewrites them
//! (review the diff before committing).

use hcp_ingress::{api::Flavor, cli::render_documents, sources::SourceKind};

use crate::{documents, inputs, root};

fn golden_path(input: &std::path::Path) -> std::path::PathBuf {
    root()
        .join("test/foundation/golden")
        .join(input.file_name().unwrap())
}

#[test]
fn every_input_renders_its_golden_output() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    // Rewriting makes this test pass whatever the output: never in CI.
    assert!(
        !(update && std::env::var_os("CI").is_some()),
        "UPDATE_GOLDEN is set under CI: goldens are rewritten by a developer, reviewed, and committed"
    );
    let mut mismatches = Vec::new();
    for input in inputs() {
        let text = std::fs::read_to_string(&input).unwrap();
        let rendered = render_documents(&input.display().to_string(), &text)
            .unwrap_or_else(|e| panic!("{} must render: {e}", input.display()));
        let actual: String = rendered
            .objects
            .iter()
            .map(|o| format!("---\n{}", serde_saphyr::to_string(o).unwrap()))
            .collect();
        let path = golden_path(&input);
        if update {
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            mismatches.push(format!(
                "{} differs from {}:\n{}",
                input.display(),
                path.display(),
                pretty_assertions::StrComparison::new(&expected, &actual)
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The goldens must cover every flavor and every source kind, or they prove less than they seem.
#[test]
fn goldens_cover_every_flavor_and_source_kind() {
    let mut flavors = std::collections::BTreeSet::new();
    let mut kinds = std::collections::BTreeSet::new();
    for input in inputs() {
        let text = std::fs::read_to_string(&input).unwrap();
        for doc in documents(&text) {
            let (api_version, kind) = (
                doc["apiVersion"].as_str().unwrap(),
                doc["kind"].as_str().unwrap(),
            );
            if let Some(source) = SourceKind::of(api_version, kind) {
                kinds.insert(source.flag_name());
            }
        }
        let rendered = render_documents("x", &text).unwrap();
        for obj in &rendered.objects {
            if obj["kind"] == "ControlPlaneIngress" {
                let cpi: hcp_ingress::api::ControlPlaneIngress =
                    serde_json::from_value(obj.clone()).unwrap();
                flavors.insert(cpi.spec.flavor().as_str());
            }
        }
        for doc in documents(&text)
            .into_iter()
            .filter(|d| d["kind"] == "ControlPlaneIngress")
        {
            let cpi: hcp_ingress::api::ControlPlaneIngress = serde_json::from_value(doc).unwrap();
            flavors.insert(cpi.spec.flavor().as_str());
        }
    }
    for flavor in Flavor::ALL {
        assert!(
            flavors.contains(flavor.as_str()),
            "no golden test renders flavor {flavor}"
        );
    }
    for kind in SourceKind::ALL {
        assert!(
            kinds.contains(kind.flag_name()),
            "no golden test derives from {kind:?}"
        );
    }
}

/// What each flavor must put on its route, checked on the rendered objects
/// rather than only through the golden text.
#[test]
fn each_flavor_carries_its_passthrough_setting() {
    // (example, route kind, annotations it must carry)
    type Expectation<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let expectations: &[Expectation] = &[
        (
            "examples/kamaji-tenantcontrolplane.yaml",
            "Ingress",
            &[("haproxy.org/ssl-passthrough", "true")],
        ),
        (
            "examples/steward-tenantcontrolplane.yaml",
            "Ingress",
            &[("haproxy.org/ssl-passthrough", "true")],
        ),
        (
            "../test/foundation/fixtures/haproxy-ingress.yaml",
            "Ingress",
            &[("haproxy-ingress.github.io/ssl-passthrough", "true")],
        ),
        (
            "examples/k0smotron-cluster.yaml",
            "Ingress",
            &[
                ("nginx.ingress.kubernetes.io/ssl-passthrough", "true"),
                ("nginx.ingress.kubernetes.io/backend-protocol", "HTTPS"),
                // the user's annotation is kept next to the flavor's
                ("nginx.ingress.kubernetes.io/proxy-read-timeout", "3600"),
            ],
        ),
    ];
    for (file, kind, annotations) in expectations {
        let text = std::fs::read_to_string(root().join("templates").join(file)).unwrap();
        let rendered = render_documents(file, &text).unwrap();
        let route = rendered
            .objects
            .iter()
            .find(|o| o["kind"] == *kind)
            .unwrap();
        for (key, value) in *annotations {
            assert_eq!(
                route["metadata"]["annotations"][key], *value,
                "{file}: annotation {key}"
            );
        }
        assert_eq!(
            route["spec"]["rules"][0]["http"]["paths"][0]["pathType"],
            "Prefix"
        );
    }
}

#[test]
fn user_annotations_win_over_flavor_defaults() {
    let text =
        std::fs::read_to_string(root().join("test/foundation/fixtures/override-annotation.yaml"))
            .unwrap();
    let rendered = render_documents("override", &text).unwrap();
    let ingress = &rendered.objects[0];
    assert_eq!(
        ingress["metadata"]["annotations"]["haproxy.org/ssl-passthrough"],
        "false"
    );
}

#[test]
fn deploy_false_renders_no_route_and_no_konnectivity_host_renders_one_rule() {
    let text =
        std::fs::read_to_string(root().join("test/foundation/fixtures/deploy-false.yaml")).unwrap();
    assert!(
        render_documents("deploy-false", &text)
            .unwrap()
            .objects
            .is_empty()
    );

    let text =
        std::fs::read_to_string(root().join("test/foundation/fixtures/api-only.yaml")).unwrap();
    let rendered = render_documents("api-only", &text).unwrap();
    let kinds: Vec<_> = rendered
        .objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["Ingress", "TLSRoute"],
        "one object per flavor, one TLSRoute for one host"
    );
    assert_eq!(
        rendered.objects[0]["spec"]["rules"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn every_object_is_labelled_and_owned() {
    for input in inputs() {
        let text = std::fs::read_to_string(&input).unwrap();
        let source_kinds: Vec<String> = documents(&text)
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect();
        let rendered = render_documents("x", &text).unwrap();
        for obj in &rendered.objects {
            let meta = &obj["metadata"];
            let name = format!("{} {} in {}", obj["kind"], meta["name"], input.display());
            assert!(
                meta["labels"]["cluster.x-k8s.io/cluster-name"].is_string(),
                "{name}: cluster label"
            );
            assert_eq!(
                meta["labels"]["app.kubernetes.io/managed-by"], "hcp-ingress",
                "{name}"
            );
            match meta["ownerReferences"].as_array() {
                Some(owners) => {
                    assert_eq!(owners.len(), 1, "{name}");
                    assert_eq!(owners[0]["controller"], true, "{name}");
                    let owner_kind = owners[0]["kind"].as_str().unwrap();
                    if obj["kind"] == "ControlPlaneIngress" {
                        assert!(
                            source_kinds.iter().any(|k| k == owner_kind),
                            "{name}: owned by its source"
                        );
                    } else {
                        assert_eq!(owner_kind, "ControlPlaneIngress", "{name}");
                    }
                }
                // Inputs carry uids; only routes of a ControlPlaneIngress that does not exist yet
                // (derived from a source) cannot name their owner, and the CLI says so.
                None => {
                    assert_ne!(
                        obj["kind"], "ControlPlaneIngress",
                        "{name}: derived object without owner"
                    );
                    assert!(
                        !source_kinds.iter().any(|k| k == "ControlPlaneIngress"),
                        "{name}: not owned"
                    );
                    assert!(
                        rendered
                            .notes
                            .iter()
                            .any(|n| n.contains("no ownerReferences")),
                        "{name}: note"
                    );
                }
            }
        }
    }
}
