//! Every upstream CRD in /work/shared/schemas loads and is structural; CEL rule census.

use std::path::{Path, PathBuf};

use crdschema::{RuleStatus, load_dir, structural_problems};

fn schemas_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/schemas")
}

#[test]
fn every_upstream_file_loads_with_one_crd() {
    let dir = schemas_dir();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let crds = crdschema::load_file(&p).unwrap();
        assert_eq!(crds.len(), 1, "{}", p.display());
        let crd = &crds[0];
        assert!(!crd.served_versions().is_empty(), "{}", p.display());
        let file = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(file, format!("{}_{}.yaml", crd.group(), crd.plural()));
        assert!(matches!(crd.scope(), "Namespaced" | "Cluster"));
        n += 1;
    }
    assert_eq!(n, 17);
    assert_eq!(load_dir(&dir).unwrap().len(), 17);
}

#[test]
fn every_served_upstream_schema_is_structural() {
    let mut all = Vec::new();
    for crd in load_dir(&schemas_dir()).unwrap() {
        for v in crd.served_versions() {
            let schema = crd.schema(v).expect("served version has a schema");
            for p in structural_problems(schema) {
                all.push(format!("{}/{v} ({}): {p}", crd.group(), crd.kind()));
            }
        }
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

/// Census of x-kubernetes-validations rules: which ones we cannot evaluate.
/// Printed with `--nocapture`; the numbers are pinned so a change is noticed.
#[test]
fn cel_rule_census() {
    let (mut evaluated, mut transition, mut unsupported) = (0, 0, 0);
    for crd in load_dir(&schemas_dir()).unwrap() {
        for v in crd.served_versions() {
            for r in crd.cel_rules(v) {
                match &r.status {
                    RuleStatus::Evaluated => evaluated += 1,
                    RuleStatus::Transition => transition += 1,
                    other => {
                        unsupported += 1;
                        println!("{} {v} {}: {:?}: {}", crd.kind(), r.path, other, r.rule);
                    }
                }
            }
        }
    }
    println!("evaluated {evaluated}, transition {transition}, unsupported {unsupported}");
    assert_eq!((evaluated, transition, unsupported), (289, 21, 0));
}
