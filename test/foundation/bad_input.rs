//! Bad input: each case names the object and the field, exits 2, prints nothing on stdout.

use std::{io::Write, process::Stdio};

use hcp_ingress::cli::render_documents;

const CPI_HEAD: &str = "apiVersion: hcp-ingress.dev/v1alpha1
kind: ControlPlaneIngress
metadata: {name: bad, namespace: tenants}
spec:
  clusterName: bad
";
const BACKEND: &str =
    "  backend: {serviceName: kmc-bad, apiPort: 30443, konnectivityPort: 30132}\n";

fn cpi(body: &str) -> String {
    format!("{CPI_HEAD}{BACKEND}{body}")
}

/// (case, input, every fragment the message must contain)
fn cases() -> Vec<(&'static str, String, Vec<&'static str>)> {
    let obj = "ControlPlaneIngress tenants/bad";
    vec![
        (
            "empty apiHost",
            cpi("  ingress: {apiHost: \"\"}"),
            vec![obj, "spec.ingress.apiHost", "must not be empty"],
        ),
        (
            "upper-case host",
            cpi("  ingress: {apiHost: API.tenant.example.com}"),
            vec![obj, "spec.ingress.apiHost", "character 'A' is not allowed"],
        ),
        (
            "underscore in host",
            cpi("  ingress: {apiHost: api.t, konnectivityHost: konn_t.example.com}"),
            vec![
                obj,
                "spec.ingress.konnectivityHost",
                "character '_' is not allowed",
            ],
        ),
        (
            "port 0",
            cpi("  ingress: {apiHost: api.t, port: 0}"),
            vec![obj, "spec.ingress.port", "0 is out of range 1-65535"],
        ),
        (
            "port 70000",
            cpi("  ingress: {apiHost: api.t, port: 70000}"),
            vec![obj, "spec.ingress.port", "70000 is out of range 1-65535"],
        ),
        (
            "unknown flavor",
            cpi("  ingress: {apiHost: api.t}\n  route: {controller: envoy}"),
            vec![
                obj,
                "spec.route.controller",
                "unknown variant `envoy`",
                "haproxy-ingress",
            ],
        ),
        (
            "konnectivityHost equal to apiHost",
            cpi("  ingress: {apiHost: api.t, konnectivityHost: api.t}"),
            vec![
                obj,
                "spec.ingress.konnectivityHost",
                "must differ from spec.ingress.apiHost",
            ],
        ),
        (
            "invalid annotation key",
            cpi(
                "  ingress: {apiHost: api.t, annotations: {\"haproxy.org/ssl passthrough\": \"true\"}}",
            ),
            vec![
                obj,
                "spec.ingress.annotations",
                "annotation key \"haproxy.org/ssl passthrough\" is invalid",
            ],
        ),
        (
            "gateway without parentRefs",
            cpi("  ingress: {apiHost: api.t}\n  route: {controller: gateway}"),
            vec![
                obj,
                "spec.route.gateway.parentRefs",
                "needs at least one Gateway",
            ],
        ),
        (
            "source without ingress block",
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: K0smotronControlPlane
metadata: {name: cp, namespace: tenants}
spec: {version: v1.33.4-k0s.0}"
                .into(),
            vec![
                "K0smotronControlPlane tenants/cp",
                "spec.ingress",
                "missing",
            ],
        ),
        (
            "source with ingress disabled",
            "apiVersion: k0rdent.mirantis.com/v1beta1
kind: ClusterDeployment
metadata: {name: cd, namespace: kcm-system}
spec:
  template: t
  config: {ingress: {enabled: false, apiHost: api.t, konnectivityHost: konn.t}}"
                .into(),
            vec![
                "ClusterDeployment kcm-system/cd",
                "spec.config.ingress.enabled",
                "disabled",
            ],
        ),
        (
            "source with an invalid host names the source's own field",
            "apiVersion: k0rdent.mirantis.com/v1beta1
kind: ClusterDeployment
metadata: {name: cd, namespace: kcm-system}
spec:
  template: t
  config: {ingress: {enabled: true, apiHost: Api.T, konnectivityHost: konn.t}}"
                .into(),
            vec![
                "ClusterDeployment kcm-system/cd",
                "spec.config.ingress.apiHost",
                "not a valid RFC 1123 host name",
            ],
        ),
        (
            "source with a port out of range",
            "apiVersion: k0smotron.io/v1beta2
kind: Cluster
metadata: {name: km, namespace: tenants}
spec:
  service: {type: ClusterIP, apiPort: 70000}
  ingress: {apiHost: api.t, konnectivityHost: konn.t}"
                .into(),
            vec![
                "Cluster tenants/km",
                "spec.service.apiPort",
                "70000 is out of range",
            ],
        ),
        (
            "source field of the wrong type names the field in the upstream's schema",
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: K0smotronControlPlane
metadata: {name: cp, namespace: tenants}
spec:
  ingress: {apiHost: api.t, konnectivityHost: konn.t, port: https}"
                .into(),
            vec![
                "K0smotronControlPlane tenants/cp",
                "spec.ingress.port",
                "invalid type: string \"https\", expected i64",
            ],
        ),
        (
            "a free-form template value of the wrong type is named under spec.config",
            "apiVersion: k0rdent.mirantis.com/v1beta1
kind: ClusterDeployment
metadata: {name: cd, namespace: kcm-system}
spec:
  template: t
  config:
    ingress: {enabled: true, apiHost: api.t, konnectivityHost: konn.t}
    k0smotron: {service: {apiPort: [6443]}}"
                .into(),
            vec![
                "ClusterDeployment kcm-system/cd",
                "spec.config.k0smotron.service.apiPort",
            ],
        ),
        (
            "domain annotation that is not a domain",
            "apiVersion: kamaji.clastix.io/v1alpha1
kind: TenantControlPlane
metadata: {name: tcp, namespace: tenants, annotations: {hcp-ingress.dev/domain: Example_Com}}
spec: {controlPlane: {}, kubernetes: {version: v1.33.0}}"
                .into(),
            vec![
                "TenantControlPlane tenants/tcp",
                "metadata.annotations[hcp-ingress.dev/domain]",
            ],
        ),
        (
            "unsupported kind",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: tenants}".into(),
            vec![
                "ConfigMap tenants/c",
                "neither a ControlPlaneIngress nor a supported source",
            ],
        ),
    ]
}

#[test]
fn each_bad_input_gets_a_message_naming_object_and_field() {
    for (case, input, fragments) in cases() {
        let error = render_documents("input.yaml", &input)
            .expect_err(case)
            .to_string();
        for fragment in fragments {
            assert!(
                error.contains(fragment),
                "{case}: {error:?} lacks {fragment:?}"
            );
        }
    }
}

/// The CLI contract: exit code 2, the message on stderr, nothing on stdout, even
/// when an earlier document in the same file was valid.
#[test]
fn render_command_exits_2_and_prints_nothing_on_stdout() {
    let valid = cpi("  ingress: {apiHost: api.t, className: haproxy}");
    for (case, input, fragments) in cases() {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
            .args(["render", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{valid}\n---\n{input}").as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{case}");
        assert!(
            output.stdout.is_empty(),
            "{case}: stdout {:?}",
            String::from_utf8_lossy(&output.stdout)
        );
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains(fragments[0]), "{case}: {stderr}");
    }
}

#[test]
fn render_reads_files_and_prints_json_lists() {
    let path = crate::root().join("templates/examples/k0smotron-cluster.yaml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .args(["render", "-o", "json", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let kinds: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ControlPlaneIngress", "Ingress"]);

    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .args(["render", "-f", "/nonexistent/file.yaml"])
        .output()
        .unwrap();
    assert_eq!(
        missing.status.code(),
        Some(1),
        "an unreadable file is an I/O failure, not bad input"
    );
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("failed to read /nonexistent/file.yaml")
    );
}
