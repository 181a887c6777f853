//! `templates/`: the k0rdent ClusterTemplate piece (values, schema, template
//! paths) and the ClusterResourceSet recipe. The Go templates are rendered
//! by helm in `test/chart/k0rdent.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{describe, documents, root, yaml_file};

fn chart() -> PathBuf {
    root().join("templates/k0rdent/hcp-ingress")
}

fn schema() -> Value {
    let path = chart().join("values.schema.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft7::new(&schema()).expect("values.schema.json compiles as draft-07")
}

fn errors(validator: &jsonschema::Validator, values: &Value) -> Vec<String> {
    validator
        .iter_errors(values)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

#[test]
fn values_schema_is_a_draft7_json_schema() {
    let schema = schema();
    assert_eq!(
        schema["$schema"], "http://json-schema.org/draft-07/schema#",
        "Helm reads draft-07"
    );
    let meta_errors: Vec<String> = jsonschema::draft7::meta::validator()
        .iter_errors(&schema)
        .map(|e| e.to_string())
        .collect();
    assert!(
        meta_errors.is_empty(),
        "values.schema.json is not a valid draft-07 schema: {meta_errors:?}"
    );
    validator();
}

#[test]
fn chart_values_and_ci_values_validate() {
    let validator = validator();
    let mut inputs = vec![chart().join("values.yaml")];
    inputs.extend(files(&chart().join("ci"), "yaml"));
    assert!(inputs.len() >= 3, "ci/ holds example values");
    for path in inputs {
        let values = yaml_file(&path);
        let errs = errors(&validator, &values);
        assert!(
            errs.is_empty(),
            "{} does not validate: {errs:?}",
            path.display()
        );
    }
}

/// The ClusterDeployment example's `spec.config` is exactly what k0rdent hands
/// the template as values: it must validate.
#[test]
fn k0rdent_example_config_validates_against_the_values_schema() {
    let path = root().join("templates/examples/k0rdent-clusterdeployment.yaml");
    let docs = documents(&std::fs::read_to_string(&path).unwrap());
    let cd = docs
        .iter()
        .find(|d| d["kind"] == "ClusterDeployment")
        .expect("a ClusterDeployment");
    let errs = errors(&validator(), &cd["spec"]["config"]);
    assert!(
        errs.is_empty(),
        "{}: spec.config does not validate: {errs:?}",
        describe(cd)
    );
}

#[test]
fn values_schema_refuses_bad_values() {
    let validator = validator();
    let ok = json!({"ingress": {"enabled": true, "apiHost": "api.t.example.com", "konnectivityHost": "k.t.example.com"}});
    assert!(errors(&validator, &ok).is_empty());
    let cases = [
        (
            "enabled without hosts",
            json!({"ingress": {"enabled": true}}),
        ),
        (
            "enabled with an empty host",
            json!({"ingress": {"enabled": true, "apiHost": "", "konnectivityHost": "k.example.com"}}),
        ),
        (
            "upper-case host",
            json!({"ingress": {"enabled": true, "apiHost": "API.example.com", "konnectivityHost": "k.example.com"}}),
        ),
        ("port out of range", json!({"ingress": {"port": 70000}})),
        ("port as a string", json!({"ingress": {"port": "443"}})),
        (
            "misspelled field",
            json!({"ingress": {"apihost": "api.example.com"}}),
        ),
        (
            "annotation value not a string",
            json!({"ingress": {"annotations": {"a": 1}}}),
        ),
        (
            "unknown flavor",
            json!({"hcpIngress": {"route": {"controller": "envoy"}}}),
        ),
        (
            "gateway without parentRefs",
            json!({"hcpIngress": {"route": {"controller": "gateway"}}}),
        ),
        (
            "unknown proxy mode",
            json!({"hcpIngress": {"proxy": {"mode": "tunnel"}}}),
        ),
        (
            "CCM target without name",
            json!({"hcpIngress": {"ccm": {"targets": [{"kind": "Deployment"}]}}}),
        ),
        (
            "unknown service type",
            json!({"k0smotron": {"service": {"type": "ExternalName"}}}),
        ),
    ];
    for (what, values) in cases {
        assert!(
            !errors(&validator, &values).is_empty(),
            "{what} must be refused: {values}"
        );
    }
}

/// The `ingress` block has the k0rdent ClusterDeployment's field names: the
/// ControlPlaneIngress `spec.ingress` fields plus `enabled`.
#[test]
fn ingress_values_have_the_seed_field_names() {
    let crd: Value = serde_saphyr::from_str(&hcp_ingress::cli::crd_yaml()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let keys = |v: &Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
    let mut want = keys(&spec["ingress"]["properties"]);
    want.insert("enabled".into());
    let schema = schema();
    assert_eq!(
        keys(&schema["properties"]["ingress"]["properties"]),
        want,
        "values.schema.json ingress"
    );
    assert_eq!(
        keys(&yaml_file(&chart().join("values.yaml"))["ingress"]),
        want,
        "values.yaml ingress"
    );
    // hcpIngress.route/proxy/ccm/backend mirror the ControlPlaneIngress fields.
    let hcp = &schema["properties"]["hcpIngress"]["properties"];
    for field in ["route", "proxy", "ccm", "backend"] {
        assert_eq!(
            keys(&hcp[field]["properties"]),
            keys(&spec[field]["properties"]),
            "hcpIngress.{field}"
        );
    }
}

/// Every `.Values.a.b` the templates read exists in values.yaml and in the schema.
#[test]
fn template_value_paths_exist_in_values_and_schema() {
    let values = yaml_file(&chart().join("values.yaml"));
    let schema = schema();
    let mut seen = 0;
    for path in files(&chart().join("templates"), "yaml")
        .into_iter()
        .chain(files(&chart().join("templates"), "tpl"))
    {
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices(".Values.") {
            let tail = &text[at + ".Values.".len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .unwrap_or(tail.len());
            let dotted = tail[..end].trim_end_matches('.');
            seen += 1;
            let (mut v, mut s) = (&values, &schema);
            for key in dotted.split('.') {
                v = &v[key];
                s = &s["properties"][key];
                assert!(
                    !v.is_null(),
                    "{}: .Values.{dotted} is not in values.yaml",
                    path.display()
                );
                assert!(
                    s.is_object(),
                    "{}: .Values.{dotted} is not in values.schema.json",
                    path.display()
                );
            }
        }
    }
    assert!(seen > 5, "the templates read values");
}

#[test]
fn clusterresourceset_recipe_validates_against_the_upstream_schema() {
    let schemas = root().join("../shared/schemas/addons.cluster.x-k8s.io_clusterresourcesets.yaml");
    let text =
        std::fs::read_to_string(&schemas).unwrap_or_else(|e| panic!("{}: {e}", schemas.display()));
    let crd =
        crdschema::Crd::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", schemas.display()));
    let path = root().join("templates/clusterresourceset/clusterresourceset.yaml");
    let docs = documents(&std::fs::read_to_string(&path).unwrap());
    let crs = docs
        .iter()
        .find(|d| d["kind"] == "ClusterResourceSet")
        .expect("a ClusterResourceSet");
    if let Err(violations) = crd.validate(crs) {
        panic!("{}: {violations:?}", describe(crs));
    }
    // Every resource it names is in the recipe, with the type CAPI requires of a Secret.
    for resource in crs["spec"]["resources"].as_array().unwrap() {
        let obj = docs
            .iter()
            .find(|d| d["kind"] == resource["kind"] && d["metadata"]["name"] == resource["name"])
            .unwrap_or_else(|| panic!("{resource} is not in the recipe"));
        assert_eq!(
            obj["metadata"]["namespace"],
            crs["metadata"]["namespace"],
            "{}",
            describe(obj)
        );
        if obj["kind"] == "Secret" {
            assert_eq!(
                obj["type"],
                "addons.cluster.x-k8s.io/resource-set",
                "{}",
                describe(obj)
            );
        }
    }
}
