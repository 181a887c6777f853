//! The typed upstream kinds in `src/api/upstream/` are kopium's output for
//! the upstream CRDs in ../shared/schemas, cut down to the fields hcp-ingress
//! reads, and nothing else: this is their generator and their check.
//!
//! The cut is made on the schema, before kopium sees it (kopium has no
//! option for it): each kind lists the field paths it keeps, and every other
//! property is dropped. `required` and `enum` are dropped too: the API server
//! enforces both before an object reaches us, and the adapters keep their
//! own messages for a missing or unknown value (which a unit test or `render`
//! input can still hold) instead of a bare serde error.
//!
//! Without kopium (CI does not build it: minutes on two cores) the test
//! still fails when a schema or a kept path changes (the header records the
//! digest of kopium's input) and when a generated file was edited by hand
//! (the header records the digest of the code). With kopium at the recorded
//! version it regenerates every file and compares byte for byte.
//! `hack/gen-upstream-types.sh` rewrites the files.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use md5::{Digest, Md5};
use serde_json::{Map, Value};

/// One generated file: which CRD and version, and the fields kept.
struct Generated {
    /// File under `src/api/upstream/`.
    file: &'static str,
    /// File under ../shared/schemas.
    crd: &'static str,
    version: &'static str,
    /// Dotted paths from the object root; a path keeps its whole subtree, a
    /// path ending in `{}` keeps only that the object is there (upstreams
    /// turn addons on by a block's presence).
    keep: &'static [&'static str],
}

const GENERATED: &[Generated] = &[
    Generated {
        file: "k0smotron_control_plane.rs",
        crd: "controlplane.cluster.x-k8s.io_k0smotroncontrolplanes.yaml",
        version: "v1beta2",
        keep: &["spec.ingress", "spec.service"],
    },
    Generated {
        file: "k0smotron_cluster.rs",
        crd: "k0smotron.io_clusters.yaml",
        version: "v1beta2",
        keep: &["spec.ingress", "spec.service"],
    },
    Generated {
        file: "cluster_deployment.rs",
        crd: "k0rdent.mirantis.com_clusterdeployments.yaml",
        version: "v1beta1",
        keep: &["spec.config"],
    },
    Generated {
        file: "capi_cluster_v1beta2.rs",
        crd: "cluster.x-k8s.io_clusters.yaml",
        version: "v1beta2",
        keep: &[
            "spec.controlPlaneRef.name",
            "spec.paused",
            "spec.clusterNetwork.serviceDomain",
            "status.initialization.controlPlaneInitialized",
            "status.conditions.type",
            "status.conditions.status",
        ],
    },
    Generated {
        file: "capi_cluster_v1beta1.rs",
        crd: "cluster.x-k8s.io_clusters.yaml",
        version: "v1beta1",
        keep: &[
            "spec.controlPlaneRef.name",
            "spec.paused",
            "spec.clusterNetwork.serviceDomain",
            "status.controlPlaneReady",
            "status.conditions.type",
            "status.conditions.status",
        ],
    },
    Generated {
        file: "kamaji_tenant_control_plane.rs",
        crd: "kamaji.clastix.io_tenantcontrolplanes.yaml",
        version: "v1alpha1",
        keep: &[
            "spec.controlPlane.gateway{}",
            "spec.controlPlane.ingress.hostname",
            "spec.controlPlane.ingress.ingressClassName",
            "spec.controlPlane.deployment.extraArgs.apiServer",
            "spec.networkProfile.port",
            "spec.networkProfile.certSANs",
            "spec.addons.konnectivity.server.port",
            "spec.addons.konnectivity.agent.extraArgs",
        ],
    },
    Generated {
        file: "steward_tenant_control_plane.rs",
        crd: "steward.butlerlabs.dev_tenantcontrolplanes.yaml",
        version: "v1alpha1",
        keep: &[
            "spec.controlPlane.ingress.hostname",
            "spec.controlPlane.ingress.ingressClassName",
            "spec.controlPlane.ingress.controllerType",
            "spec.controlPlane.deployment.extraArgs.apiServer",
            "spec.networkProfile.port",
            "spec.networkProfile.certSANs",
            "spec.addons.konnectivity.server.port",
            "spec.addons.konnectivity.agent.extraArgs",
            "spec.addons.tcpProxy{}",
        ],
    },
    Generated {
        file: "tls_route.rs",
        crd: "gateway.networking.k8s.io_tlsroutes.yaml",
        version: "v1",
        keep: &["spec.hostnames"],
    },
    Generated {
        file: "ingress_route_tcp.rs",
        crd: "traefik.io_ingressroutetcps.yaml",
        version: "v1alpha1",
        keep: &["spec.routes.match"],
    },
];

/// kopium's flags: plain spec and status structs (the objects are watched
/// as `DynamicObject`s, and we never publish these schemas), Default so a
/// missing block reads as an empty one, doc comments kept, and nothing
/// swapped for a k8s-openapi type: the cut leaves no full Condition or
/// ObjectReference, and what we read is what the schema says.
const KOPIUM_ARGS: &[&str] = &[
    "--hide-kube",
    "--derive=Default",
    "--docs",
    "--no-condition",
    "--no-object-reference",
];

/// Schema keys kept on every node; the rest (validations, defaults, enums,
/// `required`) is the API server's business.
const NODE_KEYS: &[&str] = &[
    "type",
    "format",
    "description",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
];

fn upstream_dir() -> PathBuf {
    crate::root().join("src/api/upstream")
}

/// The CRD of `g` with one version, the one to generate, and its schema cut.
fn filtered_crd(g: &Generated) -> Value {
    let path = crate::upstream_schemas().join(g.crd);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut crd: Value = serde_saphyr::from_str(&text).unwrap();
    let versions = crd["spec"]["versions"].as_array().unwrap();
    let mut version = versions
        .iter()
        .find(|v| v["name"] == g.version)
        .unwrap_or_else(|| panic!("{} has no version {}", g.crd, g.version))
        .clone();
    let schema = &version["schema"]["openAPIV3Schema"];
    let paths: Vec<Vec<&str>> = g.keep.iter().map(|p| p.split('.').collect()).collect();
    let cut = cut(schema, &paths.iter().map(Vec::as_slice).collect::<Vec<_>>());
    version["schema"]["openAPIV3Schema"] = cut;
    // One version only, and no conversion webhook: kopium reads the rest too.
    version["storage"] = Value::Bool(true);
    crd["spec"]["versions"] = Value::Array(vec![version]);
    crd["spec"].as_object_mut().unwrap().remove("conversion");
    crd["metadata"] = serde_json::json!({"name": crd["metadata"]["name"]});
    crd
}

/// The schema `node` with only the properties on `paths` (relative to it).
fn cut(node: &Value, paths: &[&[&str]]) -> Value {
    let mut out = Map::new();
    for key in NODE_KEYS {
        if let Some(v) = node.get(*key) {
            out.insert(key.to_string(), v.clone());
        }
    }
    if paths.iter().any(|p| p.is_empty()) {
        // A kept leaf: its whole subtree.
        return whole(node);
    }
    if paths.iter().any(|p| p.len() == 1 && p[0] == "{}") {
        return Value::Object(out);
    }
    if node["type"] == "array" {
        out.insert("items".into(), cut(&node["items"], paths));
        return Value::Object(out);
    }
    let mut properties = Map::new();
    let props = node["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("no properties under {paths:?}"));
    let mut names: Vec<&str> = Vec::new();
    for p in paths {
        let name = p[0].trim_end_matches("{}");
        if !names.contains(&name) {
            names.push(name);
        }
    }
    for name in names {
        let child = props
            .get(name)
            .unwrap_or_else(|| panic!("the schema has no property {name}"));
        let below: Vec<Vec<&str>> = paths
            .iter()
            .filter(|p| p[0].trim_end_matches("{}") == name)
            .map(|p| {
                if p[0].ends_with("{}") {
                    vec!["{}"]
                } else {
                    p[1..].to_vec()
                }
            })
            .collect();
        let below: Vec<&[&str]> = below.iter().map(Vec::as_slice).collect();
        properties.insert(name.to_string(), cut(child, &below));
    }
    out.insert("properties".into(), Value::Object(properties));
    Value::Object(out)
}

/// `node` and everything under it, with only [`NODE_KEYS`].
fn whole(node: &Value) -> Value {
    let mut out = Map::new();
    for key in NODE_KEYS {
        if let Some(v) = node.get(*key) {
            out.insert(key.to_string(), v.clone());
        }
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        let props = props.iter().map(|(k, v)| (k.clone(), whole(v))).collect();
        out.insert("properties".into(), Value::Object(props));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = node.get(key) {
            let v = if v.is_object() { whole(v) } else { v.clone() };
            out.insert(key.into(), v);
        }
    }
    Value::Object(out)
}

fn md5_hex(bytes: &[u8]) -> String {
    format!("{:x}", Md5::digest(bytes))
}

/// The header a generated file starts with, above kopium's own (which
/// names its command and version).
fn header(g: &Generated, input: &str, body: &str) -> String {
    let mut h = String::new();
    let w = &mut h;
    writeln!(
        w,
        "// Generated by hack/gen-upstream-types.sh: do not edit."
    )
    .unwrap();
    writeln!(
        w,
        "// Input: ../shared/schemas/{} version {}, cut to {}",
        g.crd,
        g.version,
        g.keep.join(", ")
    )
    .unwrap();
    writeln!(
        w,
        "// (test/foundation/upstream_types.rs; required and enum dropped), then rustfmt."
    )
    .unwrap();
    writeln!(w, "// input-md5: {}", md5_hex(input.as_bytes())).unwrap();
    writeln!(w, "// output-md5: {}", md5_hex(body.as_bytes())).unwrap();
    h
}

/// The value of `// key: value` in a generated file's leading comments.
fn header_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .take_while(|l| l.starts_with("//"))
        .find_map(|l| l.strip_prefix(&format!("// {key}: ")))
}

/// The code below our header: kopium's output as generated.
fn body(text: &str) -> &str {
    text.find("// output-md5: ")
        .and_then(|at| text[at..].find('\n').map(|end| &text[at + end + 1..]))
        .unwrap_or(text)
}

/// kopium, if installed (PATH or ~/.cargo/bin), with its version.
fn kopium() -> Option<(PathBuf, String)> {
    let candidates = [
        PathBuf::from("kopium"),
        Path::new(&std::env::var("HOME").unwrap_or_default()).join(".cargo/bin/kopium"),
    ];
    candidates.into_iter().find_map(|bin| {
        let out = Command::new(&bin).arg("--version").output().ok()?;
        let version = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .last()?
            .to_string();
        out.status.success().then_some((bin, version))
    })
}

/// kopium's output for the cut CRD `input`.
fn generate(bin: &Path, g: &Generated, input: &str) -> String {
    // kopium writes its command into the file: a relative path keeps it the same everywhere.
    let dir = std::env::temp_dir().join(format!("hcp-upstream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let crd = g.file.replace(".rs", ".json");
    std::fs::write(dir.join(&crd), input).unwrap();
    let out = Command::new(bin)
        .current_dir(&dir)
        .args(KOPIUM_ARGS)
        .arg("-f")
        .arg(&crd)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "kopium failed for {}: {}",
        g.file,
        String::from_utf8_lossy(&out.stderr)
    );
    rustfmt(&String::from_utf8(out.stdout).unwrap())
}

/// `code` as `cargo fmt` leaves it, so the files stay byte-identical under it.
fn rustfmt(code: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("rustfmt runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "rustfmt failed on kopium's output");
    String::from_utf8(out.stdout).unwrap()
}

/// Regenerate every file when `UPDATE_UPSTREAM_TYPES` is set (refused under
/// CI); otherwise check them.
#[test]
fn upstream_types_are_kopiums_output_for_the_shared_schemas() {
    let update = std::env::var_os("UPDATE_UPSTREAM_TYPES").is_some();
    assert!(
        !(update && std::env::var_os("CI").is_some()),
        "UPDATE_UPSTREAM_TYPES is for hack/gen-upstream-types.sh, not CI"
    );
    let kopium = kopium();
    if update {
        let (bin, _) = kopium
            .clone()
            .expect("hack/gen-upstream-types.sh needs kopium: cargo install kopium --locked");
        for g in GENERATED {
            let input = serde_json::to_string_pretty(&filtered_crd(g)).unwrap();
            let code = generate(&bin, g, &input);
            let text = format!("{}{code}", header(g, &input, &code));
            std::fs::write(upstream_dir().join(g.file), text).unwrap();
        }
        return;
    }
    match &kopium {
        Some((_, version)) => eprintln!("upstream types: regenerating with {version}"),
        None => eprintln!(
            "upstream types: KOPIUM NOT INSTALLED, not regenerating: checking the schema \
             digests and that no generated file was edited (cargo install kopium --locked \
             for the full check)"
        ),
    }
    let mut failures = Vec::new();
    for g in GENERATED {
        let path = upstream_dir().join(g.file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}: run hack/gen-upstream-types.sh", path.display()));
        let input = serde_json::to_string_pretty(&filtered_crd(g)).unwrap();
        let body = body(&text);
        if header_field(&text, "input-md5") != Some(md5_hex(input.as_bytes()).as_str()) {
            failures.push(format!(
                "{}: the schema or the kept fields changed since it was generated",
                g.file
            ));
        }
        if header_field(&text, "output-md5") != Some(md5_hex(body.as_bytes()).as_str()) {
            failures.push(format!("{}: edited by hand", g.file));
        }
        if let Some((bin, version)) = &kopium {
            if header_field(&text, "kopium version") == Some(version.as_str()) {
                if generate(bin, g, &input) != body {
                    failures.push(format!("{}: differs from kopium's output", g.file));
                }
            } else {
                eprintln!(
                    "upstream types: {} was generated by {:?}, this is {version}: \
                     not compared byte for byte",
                    g.file,
                    header_field(&text, "kopium version")
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nrun hack/gen-upstream-types.sh",
        failures.join("\n")
    );
}

/// The cut keeps exactly the listed paths, inside arrays too, and the
/// marker keeps a block without its fields.
#[test]
fn the_cut_keeps_only_the_listed_paths() {
    let schema = serde_json::json!({
        "type": "object", "required": ["spec"],
        "properties": {
            "spec": {"type": "object", "properties": {
                "a": {"type": "string", "enum": ["x"]},
                "b": {"type": "object", "properties": {"c": {"type": "integer"}}},
                "list": {"type": "array", "items": {"type": "object", "properties": {
                    "k": {"type": "string"}, "v": {"type": "string"}}}},
                "gone": {"type": "string"},
            }},
            "status": {"type": "object"},
        }
    });
    let paths: Vec<&[&str]> = vec![&["spec", "a"], &["spec", "b{}"], &["spec", "list", "k"]];
    assert_eq!(
        cut(&schema, &paths),
        serde_json::json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "b": {"type": "object"},
                "list": {"type": "array", "items": {"type": "object", "properties": {
                    "k": {"type": "string"}}}},
            }}}
        })
    );
}
