//! `out/addon-components.yaml`: the clusterctl provider contract and least-privilege RBAC.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::{describe, documents, root, yaml_file};

/// The provider namespace and the clusterctl label of an AddonProvider named `hcp-ingress`.
const NAMESPACE: &str = "hcp-ingress-system";
const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
const PROVIDER: &str = "addon-hcp-ingress";
const MOVE_HIERARCHY_LABEL: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";

/// Kinds the components may hold, and whether they are namespaced. A new kind
/// must be added here on purpose, with its scope.
const KINDS: &[(&str, bool)] = &[
    ("Namespace", false),
    ("CustomResourceDefinition", false),
    ("ClusterRole", false),
    ("ClusterRoleBinding", false),
    ("ServiceAccount", true),
    ("Role", true),
    ("RoleBinding", true),
    ("Deployment", true),
    ("Service", true),
];

/// Run `hack/release-manifests.sh` into `out` with extra environment; returns (success, stderr).
pub(crate) fn run_release_script(out: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new("bash");
    cmd.arg("hack/release-manifests.sh")
        .current_dir(root())
        .env("OUT", out);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("bash runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A folder of this test process: nextest runs each test in its own process,
/// and a shared folder would be rewritten under a test that is reading it.
pub(crate) fn out_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("release-{}", std::process::id()))
        .join(name)
}

/// The components text, built once per test run with the default settings.
fn components_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let out = out_dir("default");
        let (ok, stderr) = run_release_script(&out, &[]);
        assert!(
            ok,
            "hack/release-manifests.sh failed (it needs `kubectl` with kustomize, or `kustomize`, on PATH):\n{stderr}"
        );
        std::fs::read_to_string(out.join("addon-components.yaml")).expect("addon-components.yaml written")
    })
}

/// The components as JSON objects, clusterctl variables still in place.
fn components() -> Vec<Value> {
    documents(components_text())
}

/// clusterctl, as hack/capi/build.sh builds it from the Cluster API module.
/// Missing, the test fails and says how to build it: the variables are
/// checked by the program that substitutes them, never by a model of it.
fn clusterctl() -> PathBuf {
    let out = Command::new("bash")
        .args(["hack/capi/build.sh", "--print-dir"])
        .current_dir(root())
        .output()
        .expect("bash runs");
    let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/clusterctl");
    assert!(
        bin.is_file(),
        "{} is missing: run `bash hack/capi/build.sh` (hack/test.sh does)",
        bin.display()
    );
    bin
}

/// `clusterctl generate yaml --from <text>` with exactly the `HCP_INGRESS_*`
/// variables of `set` in the environment; Err is clusterctl's own message.
fn clusterctl_generate(text: &str, set: &[(&str, &str)], extra: &[&str]) -> Result<String, String> {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = out_dir(&format!(
        "generate-{}",
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let from = dir.join("addon-components.yaml");
    std::fs::write(&from, text).expect("components written");
    let mut cmd = Command::new(clusterctl());
    cmd.args(["generate", "yaml", "--from"])
        .arg(&from)
        .args(extra)
        // No clusterctl config or GitHub lookup of the user's machine.
        .env("XDG_CONFIG_HOME", &dir)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true");
    for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("HCP_INGRESS_")) {
        cmd.env_remove(name);
    }
    cmd.envs(set.iter().copied());
    let output = cmd.output().expect("clusterctl runs");
    if output.status.success() {
        Ok(String::from_utf8(output.stdout).expect("UTF-8 output"))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The components as clusterctl installs them when no variable is set.
fn defaults_substituted() -> Vec<Value> {
    let text = clusterctl_generate(components_text(), &[], &[]).unwrap_or_else(|e| {
        panic!("`clusterctl generate yaml` refuses the components with no variable set:\n{e}")
    });
    documents(&text)
}

/// The manager container of the components as clusterctl substitutes them.
fn manager_container(objects: &[Value]) -> &Value {
    &single(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn string_list(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|a| a.as_str().expect("a string"))
        .collect()
}

fn single<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let matching: Vec<_> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(
        matching.len(),
        1,
        "want exactly one {kind}, got {}",
        matching.len()
    );
    matching[0]
}

fn crate_version() -> (u64, u64) {
    let mut parts = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse::<u64>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// The contract of this release series, from `metadata.yaml`.
fn contract() -> String {
    let metadata = yaml_file(&root().join("metadata.yaml"));
    let (major, minor) = crate_version();
    metadata["releaseSeries"]
        .as_array()
        .expect("releaseSeries")
        .iter()
        .find(|s| s["major"] == major && s["minor"] == minor)
        .unwrap_or_else(|| panic!("metadata.yaml has no releaseSeries for {major}.{minor}"))["contract"]
        .as_str()
        .expect("contract")
        .to_string()
}

#[test]
fn exactly_one_namespace_and_every_namespaced_object_in_it() {
    let objects = components();
    let namespace = single(&objects, "Namespace");
    assert_eq!(namespace["metadata"]["name"], NAMESPACE);
    for obj in &objects {
        let kind = obj["kind"].as_str().expect("kind");
        let namespaced = KINDS
            .iter()
            .find(|(k, _)| *k == kind)
            .unwrap_or_else(|| {
                panic!(
                    "{}: kind not in the scope table of test/release",
                    describe(obj)
                )
            })
            .1;
        let ns = obj["metadata"]["namespace"].as_str();
        if namespaced {
            assert_eq!(
                ns,
                Some(NAMESPACE),
                "{} must be in the provider namespace",
                describe(obj)
            );
        } else {
            assert_eq!(
                ns,
                None,
                "{} is cluster-scoped and must carry no namespace",
                describe(obj)
            );
        }
    }
    // Bindings name the provider's own ServiceAccount in the provider namespace.
    let sa = single(&objects, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]),
            "{}",
            describe(binding)
        );
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role_name = &binding["roleRef"]["name"];
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == role_kind && &o["metadata"]["name"] == role_name),
            "{} refers to a missing {role_kind} {role_name}",
            describe(binding)
        );
    }
}

#[test]
fn every_object_carries_the_provider_label() {
    for obj in components() {
        assert_eq!(
            obj["metadata"]["labels"][PROVIDER_LABEL],
            PROVIDER,
            "{} lacks {PROVIDER_LABEL}: {PROVIDER}",
            describe(&obj)
        );
    }
    // On the pods too (so `kubectl get pods -l` finds them), never on the immutable selector.
    let objects = components();
    let deployment = single(&objects, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"][PROVIDER_LABEL],
        PROVIDER
    );
    assert!(
        deployment["spec"]["selector"]["matchLabels"]
            .get(PROVIDER_LABEL)
            .is_none()
    );
}

#[test]
fn clusterctl_installs_with_no_variable_set_and_documents_each() {
    // What `clusterctl init --addon hcp-ingress` asks for: every variable
    // named HCP_INGRESS_*, each with a default clusterctl accepts.
    let listed = clusterctl_generate(components_text(), &[], &["--list-variables"])
        .unwrap_or_else(|e| panic!("clusterctl generate yaml --list-variables: {e}"));
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .collect();
    assert!(!names.is_empty(), "no variables listed:\n{listed}");
    for name in &names {
        assert!(
            name.starts_with("HCP_INGRESS_")
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
            "variable {name:?} must be HCP_INGRESS_[A-Z0-9_]*"
        );
    }
    let objects = defaults_substituted();
    let container = manager_container(&objects);
    let image = container["image"].as_str().unwrap();
    let (major, minor) = crate_version();
    assert_eq!(
        image.rsplit_once(':').map(|(repo, _)| repo),
        Some("ghcr.io/hcp-ingress/hcp-ingress"),
        "default image {image}"
    );
    assert!(
        image.ends_with(&format!(":v{}", env!("CARGO_PKG_VERSION"))),
        "default image {image} is not this release (v{major}.{minor}.x)"
    );
    let args = string_list(&container["args"]);
    // Every namespace, every installed source, info logs by default.
    for want in [
        "--namespace=*",
        "--sources=all",
        "--log-level=info",
        "--concurrency=10",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    let docs = std::fs::read_to_string(root().join("docs/install-clusterctl.md"))
        .expect("docs/install-clusterctl.md");
    for kind in hcp_ingress::sources::SourceKind::ALL {
        assert!(
            docs.contains(kind.flag_name()),
            "source {} is not listed in docs/install-clusterctl.md",
            kind.flag_name()
        );
    }
    // Every variable is documented where operators look for it.
    for name in names {
        assert!(
            docs.contains(name),
            "{name} is not documented in docs/install-clusterctl.md"
        );
    }
}

#[test]
fn clusterctl_substitutes_the_image_and_flags() {
    let set = [
        ("HCP_INGRESS_IMAGE", "registry.example.com/hcp-ingress:dev"),
        ("HCP_INGRESS_LOG_LEVEL", "debug"),
        ("HCP_INGRESS_CONCURRENCY", "4"),
        ("HCP_INGRESS_SOURCES", "kamaji,steward"),
        ("HCP_INGRESS_WATCH_NAMESPACE", "tenants"),
        ("HCP_INGRESS_WATCH_FILTER", "shard-a"),
    ];
    let text = clusterctl_generate(components_text(), &set, &[]).expect("clusterctl generate yaml");
    assert!(!text.contains("${"), "a variable was left in place");
    let objects = documents(&text);
    let container = manager_container(&objects);
    assert_eq!(container["image"], "registry.example.com/hcp-ingress:dev");
    let proxy_image = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "HCP_INGRESS_IMAGE")
        .expect("HCP_INGRESS_IMAGE env");
    assert_eq!(proxy_image["value"], "registry.example.com/hcp-ingress:dev");
    let args = string_list(&container["args"]);
    for want in [
        "--log-level=debug",
        "--concurrency=4",
        "--sources=kamaji,steward",
        "--namespace=tenants",
        "--watch-filter=shard-a",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    // What the binary makes of it: shard-a's label, shard-a's own Lease.
    let cli = clap::Command::new("controller");
    let cli = <hcp_ingress::controller::ControllerArgs as clap::Args>::augment_args(cli);
    let argv = std::iter::once("controller").chain(
        args.iter()
            .copied()
            .filter(|a| *a != "controller" && !a.starts_with("--log-")),
    );
    let matches = cli
        .try_get_matches_from(argv)
        .expect("the manager's flags parse");
    let parsed =
        <hcp_ingress::controller::ControllerArgs as clap::FromArgMatches>::from_arg_matches(
            &matches,
        )
        .unwrap();
    let settings = hcp_ingress::controller::Settings::from_args(&parsed).unwrap();
    assert_eq!(
        settings.timing.shard.map(|f| f.selector),
        Some("cluster.x-k8s.io/watch-filter=shard-a".to_string())
    );
    assert_eq!(
        settings.lease.map(|l| l.name),
        Some("hcp-ingress-controller-shard-a".to_string())
    );
}

#[test]
fn crd_carries_the_clusterctl_labels_and_the_generated_schema() {
    let objects = components();
    let crd = single(&objects, "CustomResourceDefinition");
    let labels = &crd["metadata"]["labels"];
    assert!(
        labels.get(MOVE_HIERARCHY_LABEL).is_some(),
        "CRD lacks {MOVE_HIERARCHY_LABEL}"
    );
    // The CAPI contract label maps the contract of metadata.yaml to our served version.
    let contract_label = format!("cluster.x-k8s.io/{}", contract());
    assert_eq!(
        labels[&contract_label], "v1alpha1",
        "CRD label {contract_label}"
    );
    let generated: Value = serde_saphyr::from_str(&hcp_ingress::cli::crd_yaml()).unwrap();
    assert_eq!(crd["metadata"]["name"], generated["metadata"]["name"]);
    assert!(
        canonical(&crd["spec"]) == canonical(&generated["spec"]),
        "the packaged CRD's spec differs from `hcp-ingress crd`"
    );
    let committed =
        yaml_file(&root().join("config/crd/bases/hcp-ingress.dev_controlplaneingresses.yaml"));
    assert!(
        canonical(&crd["spec"]) == canonical(&committed["spec"]),
        "the packaged CRD's spec differs from config/crd/bases"
    );
}

/// Resolve a probe port (number or container port name) to a number.
fn port_number(container: &Value, port: &Value) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port.as_str().expect("port is a number or a name");
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

#[test]
fn manager_runs_leader_elected_probed_and_restricted() {
    let objects = defaults_substituted();
    let deployment = single(&objects, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one manager container");
    let c = &containers[0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args.first(),
        Some(&"controller"),
        "the image's entrypoint is the binary: args start with the subcommand"
    );
    for want in ["--leader-elect", "--log-format=json"] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    let port_of = |flag: &str| -> u64 {
        let value = args
            .iter()
            .find_map(|a| a.strip_prefix(flag))
            .unwrap_or_else(|| panic!("{flag}ADDRESS not in {args:?}"));
        value
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or_else(|| panic!("{flag}{value}: no port"))
    };
    assert_eq!(port_of("--health-addr="), 9440, "health address");
    assert_eq!(port_of("--metrics-addr="), 8443, "metrics address");
    assert_eq!(
        c["image"],
        format!(
            "ghcr.io/hcp-ingress/hcp-ingress:v{}",
            env!("CARGO_PKG_VERSION")
        )
    );

    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(port_number(c, &get["port"]), 9440, "{probe} port");
    }
    let ports: Vec<(u64, &str)> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["containerPort"].as_u64().unwrap(),
                p["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        ports.contains(&(8443, "metrics")),
        "metrics port 8443 in {ports:?}"
    );
    assert!(
        ports.contains(&(9440, "healthz")),
        "health port 9440 in {ports:?}"
    );

    // Pod Security Standard "restricted".
    let psc = &pod["securityContext"];
    let sc = &c["securityContext"];
    let either = |field: &str| {
        if sc.get(field).is_some() {
            &sc[field]
        } else {
            &psc[field]
        }
    };
    assert_eq!(either("runAsNonRoot"), true, "runAsNonRoot");
    assert_eq!(
        either("seccompProfile")["type"],
        "RuntimeDefault",
        "seccompProfile"
    );
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "allowPrivilegeEscalation"
    );
    assert_eq!(sc["readOnlyRootFilesystem"], true, "readOnlyRootFilesystem");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "drop ALL");
    assert!(
        sc["capabilities"].get("add").is_none(),
        "no added capabilities"
    );
    assert_ne!(sc["privileged"], true);
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_ne!(pod[host], true, "{host}");
    }
    assert_ne!(either("runAsUser"), 0, "runAsUser 0");
    // The controller learns its own image (the default proxy image) and its
    // namespace (the Lease's) from the environment.
    let env = |name: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("env {name} missing"))
            .clone()
    };
    assert_eq!(env("HCP_INGRESS_IMAGE")["value"], c["image"]);
    assert_eq!(
        env("POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let sa = single(&objects, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert!(c["resources"]["requests"].is_object(), "resource requests");
    let namespace = single(&objects, "Namespace");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
}

/// Once `hcp-ingress controller` has its flags, the manifest's arguments must parse.
#[test]
fn manager_args_are_accepted_by_the_binary_once_the_controller_has_flags() {
    let bin = env!("CARGO_BIN_EXE_hcp-ingress");
    let help = Command::new(bin)
        .args(["controller", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    if !help.contains("--leader-elect") {
        eprintln!(
            "note: `hcp-ingress controller` has no --leader-elect flag yet; manifest args not parsed"
        );
        return;
    }
    let objects = defaults_substituted();
    let args: Vec<String> =
        single(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
    let output = Command::new(bin)
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "`hcp-ingress {}` is rejected:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// (namespaced?, apiGroup, resource, verb) granted by the components.
type Grant = (bool, String, String, String);

fn grants(objects: &[Value]) -> BTreeSet<Grant> {
    let mut set = BTreeSet::new();
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        let namespaced = role["kind"] == "Role";
        for rule in role["rules"].as_array().unwrap() {
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "{}: nonResourceURLs",
                describe(role)
            );
            assert!(
                rule.get("resourceNames").is_none(),
                "{}: resourceNames not expected",
                describe(role)
            );
            let list = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .unwrap_or_else(|| panic!("{}: rule without {field}", describe(role)))
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            let (groups, resources, verbs) = (list("apiGroups"), list("resources"), list("verbs"));
            for (field, values) in [
                ("apiGroups", &groups),
                ("resources", &resources),
                ("verbs", &verbs),
            ] {
                assert!(
                    !values.iter().any(|v| v.contains('*')),
                    "{}: wildcard in {field}: {values:?}",
                    describe(role)
                );
            }
            for g in &groups {
                for r in &resources {
                    for v in &verbs {
                        set.insert((namespaced, g.clone(), r.clone(), v.clone()));
                    }
                }
            }
        }
    }
    set
}

#[test]
fn rbac_has_no_wildcards_and_exactly_what_the_controller_needs() {
    const READ: &[&str] = &["get", "list", "watch"];
    const MANAGE: &[&str] = &[
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    const EVENTS: &[&str] = &["create", "patch"];
    // (namespaced, group, resource, verbs): the whole least-privilege table.
    let table: &[(bool, &str, &str, &[&str])] = &[
        (false, "hcp-ingress.dev", "controlplaneingresses", MANAGE),
        (
            false,
            "hcp-ingress.dev",
            "controlplaneingresses/status",
            &["get", "update", "patch"],
        ),
        (
            false,
            "hcp-ingress.dev",
            "controlplaneingresses/finalizers",
            &["update"],
        ),
        (false, "cluster.x-k8s.io", "clusters", READ),
        (
            false,
            "controlplane.cluster.x-k8s.io",
            "k0smotroncontrolplanes",
            READ,
        ),
        (false, "k0smotron.io", "clusters", READ),
        (false, "k0rdent.mirantis.com", "clusterdeployments", READ),
        (false, "kamaji.clastix.io", "tenantcontrolplanes", READ),
        (false, "steward.butlerlabs.dev", "tenantcontrolplanes", READ),
        // Owner references with blockOwnerDeletion towards Clusters and
        // sources: OwnerReferencesPermissionEnforcement asks for these.
        (
            false,
            "cluster.x-k8s.io",
            "clusters/finalizers",
            &["update"],
        ),
        (
            false,
            "controlplane.cluster.x-k8s.io",
            "k0smotroncontrolplanes/finalizers",
            &["update"],
        ),
        (false, "k0smotron.io", "clusters/finalizers", &["update"]),
        (
            false,
            "k0rdent.mirantis.com",
            "clusterdeployments/finalizers",
            &["update"],
        ),
        (
            false,
            "kamaji.clastix.io",
            "tenantcontrolplanes/finalizers",
            &["update"],
        ),
        (
            false,
            "steward.butlerlabs.dev",
            "tenantcontrolplanes/finalizers",
            &["update"],
        ),
        (false, "", "secrets", &["get"]),
        (false, "networking.k8s.io", "ingresses", MANAGE),
        (false, "traefik.io", "ingressroutetcps", MANAGE),
        (false, "gateway.networking.k8s.io", "tlsroutes", MANAGE),
        (false, "", "events", EVENTS),
        (false, "events.k8s.io", "events", EVENTS),
        (
            false,
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            READ,
        ),
        (
            true,
            "coordination.k8s.io",
            "leases",
            &["get", "list", "watch", "create", "update", "patch"],
        ),
    ];
    let want: BTreeSet<Grant> = table
        .iter()
        .flat_map(|(ns, g, r, verbs)| {
            verbs
                .iter()
                .map(move |v| (*ns, g.to_string(), r.to_string(), v.to_string()))
        })
        .collect();
    let got = grants(&components());
    let extra: Vec<_> = got.difference(&want).collect();
    let missing: Vec<_> = want.difference(&got).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "RBAC differs from the least-privilege table\n  granted but not needed: {extra:?}\n  needed but not granted: {missing:?}"
    );
}

/// Drop nulls (a typed round trip omits empty options) and read every number as
/// f64 (kustomize prints the CRD's `65535.0` as `65535`), so equal objects compare equal.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), canonical(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Number(n) => json!(n.as_f64().expect("finite number")),
        other => other.clone(),
    }
}

fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: &Value,
) -> Result<(), String> {
    let typed: T =
        serde_json::from_value(obj.clone()).map_err(|e| format!("{}: {e}", describe(obj)))?;
    let back = serde_json::to_value(&typed).unwrap();
    if canonical(&back) == canonical(obj) {
        Ok(())
    } else {
        Err(format!(
            "{}: fields were lost or changed in a typed round trip (misspelled or misplaced field?):\n{}",
            describe(obj),
            pretty_assertions::StrComparison::new(
                &serde_saphyr::to_string(&canonical(obj)).unwrap(),
                &serde_saphyr::to_string(&canonical(&back)).unwrap()
            )
        ))
    }
}

#[test]
fn substituted_manifests_are_well_formed_kubernetes_objects() {
    use k8s_openapi::api::{apps::v1 as apps, core::v1 as core, rbac::v1 as rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    let objects = defaults_substituted();
    let mut problems = Vec::new();
    for obj in &objects {
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        assert!(
            !name.is_empty()
                && name.len() <= 253
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
            "{}: bad name",
            describe(obj)
        );
        let result = match obj["kind"].as_str().unwrap() {
            "Namespace" => round_trips::<core::Namespace>(obj),
            "ServiceAccount" => round_trips::<core::ServiceAccount>(obj),
            "Service" => round_trips::<core::Service>(obj),
            "Deployment" => round_trips::<apps::Deployment>(obj),
            "Role" => round_trips::<rbac::Role>(obj),
            "RoleBinding" => round_trips::<rbac::RoleBinding>(obj),
            "ClusterRole" => round_trips::<rbac::ClusterRole>(obj),
            "ClusterRoleBinding" => round_trips::<rbac::ClusterRoleBinding>(obj),
            "CustomResourceDefinition" => round_trips::<apiext::CustomResourceDefinition>(obj),
            other => Err(format!(
                "{}: no typed check for kind {other}",
                describe(obj)
            )),
        };
        if let Err(e) = result {
            problems.push(e);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn metadata_yaml_declares_this_release_series() {
    let metadata = yaml_file(&root().join("metadata.yaml"));
    assert_eq!(
        metadata["apiVersion"],
        "clusterctl.cluster.x-k8s.io/v1alpha3"
    );
    assert_eq!(metadata["kind"], "Metadata");
    let contract = contract();
    assert!(
        contract
            .strip_prefix("v1beta")
            .is_some_and(|n| n.parse::<u32>().is_ok()),
        "contract {contract} is not a CAPI contract version"
    );
    // The release assets carry it unchanged.
    components_text();
    let copied = yaml_file(&out_dir("default").join("metadata.yaml"));
    assert_eq!(copied, metadata);
}

#[test]
fn release_tag_sets_the_default_image_and_unknown_series_are_refused() {
    let (major, minor) = crate_version();
    let tag = format!("v{major}.{minor}.99");
    let out = out_dir("tagged");
    let (ok, stderr) = run_release_script(&out, &[("RELEASE_TAG", &tag)]);
    assert!(ok, "{stderr}");
    let text = std::fs::read_to_string(out.join("addon-components.yaml")).unwrap();
    let generated = clusterctl_generate(&text, &[], &[]).expect("clusterctl generate yaml");
    assert_eq!(
        manager_container(&documents(&generated))["image"],
        format!("ghcr.io/hcp-ingress/hcp-ingress:{tag}")
    );

    let (ok, stderr) =
        run_release_script(&out_dir("unknown-series"), &[("RELEASE_TAG", "v99.0.0")]);
    assert!(
        !ok && stderr.contains("no releaseSeries"),
        "a release outside metadata.yaml must fail: {stderr}"
    );
    let (ok, _) = run_release_script(&out_dir("bad-tag"), &[("RELEASE_TAG", "latest")]);
    assert!(!ok, "a non-semver tag must fail");
}
