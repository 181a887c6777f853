//! Golden tests: each fixture renders exactly the committed workload objects,
//! and its ClusterResourceSet where it can have one. Minted material differs
//! on every run (a fresh key), so the goldens show `<minted>` in its place;
//! the certificate tests check the real thing.
//! `UPDATE_GOLDEN=1 cargo test --test workload golden` rewrites them.

use serde_json::Value;

use crate::{inputs, render, root};

const MINTED: &str = "<minted: see the certificate tests>";

fn mask_minted(mut obj: Value) -> Value {
    if obj["kind"] == "Secret"
        && let Some(data) = obj["data"].as_object_mut()
    {
        for (key, value) in data.iter_mut() {
            if key != "ca.crt" {
                *value = Value::String(MINTED.into());
            }
        }
    }
    obj
}

fn check(name: &str, objects: Vec<Value>, mismatches: &mut Vec<String>) {
    let actual: String = objects
        .into_iter()
        .map(|o| format!("---\n{}", serde_saphyr::to_string(&mask_minted(o)).unwrap()))
        .collect();
    let path = root().join("test/workload/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        mismatches.push(format!(
            "{} differs:\n{}",
            path.display(),
            pretty_assertions::StrComparison::new(&expected, &actual)
        ));
    }
}

#[test]
fn every_fixture_renders_its_golden_workload_objects() {
    let mut mismatches = Vec::new();
    for input in inputs() {
        let name = input.file_name().unwrap().to_str().unwrap().to_string();
        check(&name, render(&input, false).objects, &mut mismatches);
        // Service steering has no ClusterResourceSet (it patches an existing Service).
        if !name.contains("service-steering") {
            check(
                &name.replace(".yaml", ".crs.yaml"),
                render(&input, true).objects,
                &mut mismatches,
            );
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn goldens_cover_both_steerings_and_two_modes() {
    let mut seen = std::collections::BTreeSet::new();
    for input in inputs() {
        for obj in render(&input, false).objects {
            if obj["kind"] == "ConfigMap" {
                let config: Value =
                    serde_saphyr::from_str(obj["data"]["config.yaml"].as_str().unwrap()).unwrap();
                seen.insert(config["mode"].as_str().unwrap().to_string());
            }
            match obj["kind"].as_str().unwrap() {
                "EndpointSlice" => seen.insert("advertise-address".into()),
                "Service" => seen.insert("service".into()),
                _ => false,
            };
        }
    }
    for want in [
        "reencrypt",
        "proxy-protocol",
        "advertise-address",
        "service",
    ] {
        assert!(seen.contains(want), "no golden renders {want}: {seen:?}");
    }
}
