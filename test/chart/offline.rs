//! What `helm lint` and `helm template` say about the chart, compared with
//! `config/` (the clusterctl install) and the generated CRD.

use std::collections::BTreeMap;

use clap::Parser;
use hcp_ingress::controller::{ControllerArgs, Settings};
use serde_json::Value;

use crate::{
    chart, ci_values, helm, manager_container, of_kind, root, run_helm, single, strings, template,
    yaml_file,
};

const NS: &str = "hcp-ingress-system";

/// The generated CRD as the chart ships it: `config/crd/bases/` with the
/// labels `config/crd/kustomization.yaml` adds for clusterctl (move
/// hierarchy, CAPI contract), which the chart needs as much.
fn expected_chart_crd() -> String {
    let base = hcp_ingress::cli::crd_yaml();
    let header = "# Generated: `hcp-ingress crd` (config/crd/bases/) with the labels of\n\
                  # config/crd/kustomization.yaml. `cargo test --test chart` pins it;\n\
                  # UPDATE_GOLDEN=1 rewrites it. Helm installs crds/ once and never upgrades\n\
                  # it: apply it yourself on upgrade (docs/helm.md).\n";
    let labelled = base.replacen(
        "metadata:\n  name:",
        "metadata:\n  labels:\n    cluster.x-k8s.io/v1beta2: v1alpha1\n    clusterctl.cluster.x-k8s.io/move-hierarchy: \"\"\n  name:",
        1,
    );
    assert_ne!(
        labelled, base,
        "the generated CRD starts with metadata.name"
    );
    format!("{header}{labelled}")
}

#[test]
fn chart_crd_is_the_generated_crd_with_the_clusterctl_labels() {
    let path = chart().join("crds/hcp-ingress.dev_controlplaneingresses.yaml");
    let want = expected_chart_crd();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} differs from `hcp-ingress crd` plus the clusterctl labels: regenerate with `UPDATE_GOLDEN=1 cargo test --test chart crd`",
        path.display()
    );
    // The same labels kustomize puts on the clusterctl CRD, read from there.
    let kustomized = std::process::Command::new("kubectl")
        .args(["kustomize", "config/crd"])
        .current_dir(root())
        .output()
        .expect("kubectl runs");
    assert!(kustomized.status.success(), "kubectl kustomize config/crd");
    let kustomized: Value = serde_saphyr::from_slice(&kustomized.stdout).unwrap();
    let ours: Value = serde_saphyr::from_str(&have).unwrap();
    assert_eq!(
        ours["metadata"], kustomized["metadata"],
        "the chart's CRD carries the name and labels of the clusterctl one"
    );
    let generated: Value = serde_saphyr::from_str(&hcp_ingress::cli::crd_yaml()).unwrap();
    assert!(
        ours["spec"] == generated["spec"],
        "the chart's CRD spec is not that of `hcp-ingress crd`"
    );
}

#[test]
fn lint_passes_with_every_ci_values_file() {
    let Some(helm) = helm() else { return };
    let chart = chart().display().to_string();
    let (ok, out, err) = run_helm(&helm, &["lint", "--strict", &chart]);
    assert!(ok, "helm lint --strict {chart}:\n{out}{err}");
    for values in ci_values() {
        let file = crate::chart().join(&values).display().to_string();
        let (ok, out, err) = run_helm(&helm, &["lint", "--strict", &chart, "--values", &file]);
        assert!(ok, "helm lint --strict --values {values}:\n{out}{err}");
    }
}

#[test]
fn rbac_rules_are_those_of_config() {
    let Some(helm) = helm() else { return };
    let config_role = yaml_file(&root().join("config/rbac/role.yaml"));
    let config_lease_role = yaml_file(&root().join("config/rbac/leader_election_role.yaml"));
    for values in ci_values() {
        let objects = template(&helm, "hcp-ingress", NS, &[&values], &[]).unwrap();
        let role = single(&objects, "ClusterRole");
        assert_eq!(
            role["rules"], config_role["rules"],
            "{values}: the chart's ClusterRole rules differ from config/rbac/role.yaml"
        );
        let sa = single(&objects, "ServiceAccount");
        let binding = single(&objects, "ClusterRoleBinding");
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
        assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
        assert_eq!(binding["subjects"][0]["namespace"], NS);
        let leader_elect =
            strings(&manager_container(&objects)["args"]).contains(&"--leader-elect".to_string());
        let roles = of_kind(&objects, "Role");
        if leader_elect {
            assert_eq!(roles.len(), 1, "{values}: one Role, for the Lease");
            assert_eq!(
                roles[0]["rules"], config_lease_role["rules"],
                "{values}: the Lease Role differs from config/rbac/leader_election_role.yaml"
            );
            let binding = single(&objects, "RoleBinding");
            assert_eq!(
                binding["metadata"]["namespace"],
                roles[0]["metadata"]["namespace"]
            );
            assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
        } else {
            assert!(
                roles.is_empty() && of_kind(&objects, "RoleBinding").is_empty(),
                "{values}: no leader election, no Lease rights"
            );
        }
    }
}

/// `${NAME:=default}` → default, as clusterctl substitutes unset variables.
fn clusterctl_defaults(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').expect("closed ${") + at;
        let inner = &rest[at + 2..end];
        out.push_str(inner.split_once(":=").map(|(_, d)| d).unwrap_or(""));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The Deployment of `config/manager/manager.yaml` with clusterctl's defaults.
fn config_deployment() -> Value {
    let text = std::fs::read_to_string(root().join("config/manager/manager.yaml")).unwrap();
    crate::documents(&clusterctl_defaults(&text))
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("config/manager has a Deployment")
}

#[derive(Parser)]
#[command(name = "controller")]
struct Flags {
    #[command(flatten)]
    args: ControllerArgs,
}

/// What the binary makes of a container's args (`controller` and its
/// flags): the settings it runs with, so that two spellings of one meaning
/// (`--namespace=` and `--namespace=*`: every namespace) compare equal.
fn parsed(args: &[String]) -> String {
    assert_eq!(args.first().map(String::as_str), Some("controller"));
    let flags = Flags::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let settings = Settings::from_args(&flags.args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    format!("{settings:?}")
}

#[test]
fn deployment_is_that_of_config_with_default_values() {
    let Some(helm) = helm() else { return };
    let objects = template(&helm, "hcp-ingress", NS, &["ci/defaults-values.yaml"], &[]).unwrap();
    let chart_deploy = single(&objects, "Deployment");
    let config_deploy = config_deployment();
    let (ours, theirs) = (
        &chart_deploy["spec"]["template"]["spec"],
        &config_deploy["spec"]["template"]["spec"],
    );
    // Arguments are equivalent when the binary parses them to the same settings.
    let (our_c, their_c) = (&ours["containers"][0], &theirs["containers"][0]);
    assert_eq!(
        parsed(&strings(&our_c["args"])),
        parsed(&strings(&their_c["args"])),
        "the chart's args {:?} mean something else than config's {:?}",
        our_c["args"],
        their_c["args"]
    );
    for field in [
        "image",
        "imagePullPolicy",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "name",
    ] {
        assert_eq!(
            our_c[field], their_c[field],
            "container field {field} differs from config/manager/manager.yaml"
        );
    }
    for field in [
        "securityContext",
        "terminationGracePeriodSeconds",
        "tolerations",
    ] {
        assert_eq!(
            ours[field], theirs[field],
            "pod field {field} differs from config/manager/manager.yaml"
        );
    }
    assert_eq!(chart_deploy["spec"]["replicas"], 1);
    let sa = single(&objects, "ServiceAccount");
    assert_eq!(ours["serviceAccountName"], sa["metadata"]["name"]);
    // The selector picks the pod template, and the metrics Service selects the pods.
    let labels = &chart_deploy["spec"]["template"]["metadata"]["labels"];
    for (k, v) in chart_deploy["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[k], v, "pod label {k}");
    }
    let service = single(&objects, "Service");
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "Service selector {k} misses the pods");
    }
    let port = &service["spec"]["ports"][0];
    assert_eq!(port["name"], "metrics");
    assert_eq!(port["targetPort"], "metrics");
    // No monitoring objects unless asked for.
    for kind in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(
            of_kind(&objects, kind).is_empty(),
            "{kind} rendered by default"
        );
    }
}

#[test]
fn values_set_the_flags_they_name() {
    let Some(helm) = helm() else { return };
    let objects = template(&helm, "hcp", NS, &["ci/airgapped-values.yaml"], &[]).unwrap();
    let c = manager_container(&objects);
    let args = strings(&c["args"]);
    for want in [
        "--namespace=tenants",
        "--watch-filter=hcp-ingress.dev/shard=a",
        "--sources=kamaji,steward",
        "--log-format=text",
    ] {
        assert!(args.contains(&want.to_string()), "{want} not in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--leader-elect")),
        "{args:?}"
    );
    assert_eq!(
        c["image"],
        "registry.internal.example/mirror/hcp-ingress:v0.1.0"
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    let pod = &single(&objects, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"][0]["name"], "mirror-pull");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    assert!(pod["affinity"]["nodeAffinity"].is_object());
    assert!(
        pod.get("tolerations").is_none(),
        "tolerations: [] renders none"
    );
    parsed(&args);

    let objects = template(&helm, "hcp", NS, &["ci/leader-lease-values.yaml"], &[]).unwrap();
    let args = strings(&manager_container(&objects)["args"]);
    for want in [
        "--leader-elect",
        "--leader-election-namespace=hcp-ingress-leases",
        "--leader-election-id=hcp-ingress-shard-a",
    ] {
        assert!(args.contains(&want.to_string()), "{want} not in {args:?}");
    }
    assert_eq!(
        single(&objects, "Role")["metadata"]["namespace"],
        "hcp-ingress-leases",
        "the Lease Role goes where the Lease is"
    );
    assert_eq!(single(&objects, "Deployment")["spec"]["replicas"], 2);
    parsed(&args);
}

/// The node proxy image the controller gets (`HCP_INGRESS_IMAGE`).
fn proxy_image(objects: &[Value]) -> String {
    manager_container(objects)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "HCP_INGRESS_IMAGE")
        .expect("HCP_INGRESS_IMAGE in the env")["value"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn proxy_image_defaults_to_the_controller_image_and_takes_kamajis_value_name() {
    let Some(helm) = helm() else { return };
    let render = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        template(&helm, "hcp", NS, &[], &sets)
    };
    let appversion = yaml_file(&chart().join("Chart.yaml"))["appVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        proxy_image(&render(&[]).unwrap()),
        format!("ghcr.io/hcp-ingress/hcp-ingress:{appversion}")
    );
    assert_eq!(
        proxy_image(&render(&["image.repository=mirror.example/hcp", "image.tag=v9"]).unwrap()),
        "mirror.example/hcp:v9",
        "a mirrored controller image is the proxy image too"
    );
    assert_eq!(
        proxy_image(&render(&["options.tcpProxyImage=mirror.example/proxy:v1"]).unwrap()),
        "mirror.example/proxy:v1"
    );
    assert_eq!(
        proxy_image(
            &render(&["proxyImage.repository=mirror.example/proxy", "image.tag=v2"]).unwrap()
        ),
        "mirror.example/proxy:v2"
    );
    // Both names, agreeing: fine; disagreeing: refused, naming both.
    assert_eq!(
        proxy_image(
            &render(&[
                "proxyImage.repository=m/p",
                "proxyImage.tag=v1",
                "options.tcpProxyImage=m/p:v1"
            ])
            .unwrap()
        ),
        "m/p:v1"
    );
    let err = render(&["proxyImage.repository=m/p", "options.tcpProxyImage=m/q:v1"]).unwrap_err();
    assert!(
        err.contains("proxyImage") && err.contains("options.tcpProxyImage"),
        "{err}"
    );
}

#[test]
fn schema_rejects_wrong_types_and_unknown_keys() {
    let Some(helm) = helm() else { return };
    for (set, says) in [
        ("replicaCount=many", "replicaCount"),
        ("concurrency=0", "concurrency"),
        ("sources={kamaji,k0rdnet}", "sources"),
        ("logLevel=verbose", "logLevel"),
        ("logFormat=xml", "logFormat"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("leaderElection.enabled=maybe", "enabled"),
        ("watchNamespace=Not_A_Namespace", "watchNamespace"),
        ("metrics.port=70000", "port"),
        ("metrics.serviceMonitor.enable=true", "enable"),
        ("replicas=2", "replicas"),
        ("options.tcpProxyImag=x", "tcpProxyImag"),
    ] {
        let err = template(&helm, "hcp", NS, &[], &[set.to_string()])
            .err()
            .unwrap_or_else(|| panic!("--set {set} was accepted"));
        assert!(
            err.contains("values don't meet the specifications of the schema")
                || err.contains("schema"),
            "--set {set}: not a schema error: {err}"
        );
        assert!(
            err.contains(says),
            "--set {set}: the error does not name {says}: {err}"
        );
    }
    // ServiceMonitor without the Service it selects: refused, saying why.
    let err = template(
        &helm,
        "hcp",
        NS,
        &[],
        &[
            "metrics.service.enabled=false".into(),
            "metrics.serviceMonitor.enabled=true".into(),
        ],
    )
    .unwrap_err();
    assert!(err.contains("metrics.service.enabled"), "{err}");
}

#[test]
fn monitoring_values_ship_the_alerts_and_the_dashboard() {
    let Some(helm) = helm() else { return };
    let objects = template(&helm, "hcp", NS, &["ci/monitoring-values.yaml"], &[]).unwrap();
    let rules_file = yaml_file(&chart().join("alerts/hcp-ingress.rules.yaml"));
    let rule = single(&objects, "PrometheusRule");
    assert_eq!(
        rule["spec"], rules_file,
        "PrometheusRule spec is the rules file"
    );
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let monitor = single(&objects, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    let service = single(&objects, "Service");
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "ServiceMonitor selects the Service by {k}"
        );
    }
    let dashboard = single(&objects, "ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        dashboard["metadata"]["labels"]["grafana_folder"],
        "hcp-ingress"
    );
    let shipped: Value =
        serde_json::from_str(dashboard["data"]["hcp-ingress.json"].as_str().unwrap())
            .expect("the ConfigMap holds the dashboard JSON");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/hcp-ingress.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file);
    // The alert groups the brief of each alert asks for are there, each with a severity.
    let alerts: BTreeMap<String, &Value> = rules_file["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| (r["alert"].as_str().unwrap().to_string(), r))
        .collect();
    // Paused=False is every healthy object's state: never an alert.
    let condition_false = alerts["HcpIngressConditionFalse"]["expr"].as_str().unwrap();
    assert!(
        condition_false.contains(r#"type!~"Ready|Paused|WorkloadReachable""#),
        "HcpIngressConditionFalse must leave out Paused (False when healthy): {condition_false}"
    );
    for (name, rule) in &alerts {
        assert!(
            matches!(
                rule["labels"]["severity"].as_str(),
                Some("warning" | "critical")
            ),
            "{name}: severity warning or critical"
        );
        assert!(
            rule["annotations"]["description"].is_string(),
            "{name}: description"
        );
    }
}

#[test]
fn chart_version_is_the_crate_version() {
    let chart_yaml = yaml_file(&chart().join("Chart.yaml"));
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart_yaml["version"], version, "Chart.yaml version");
    assert_eq!(
        chart_yaml["appVersion"],
        format!("v{version}"),
        "Chart.yaml appVersion: the image tag of this release"
    );
}

#[test]
fn dashboard_is_a_grafana_dashboard_with_unique_panels_on_the_grid() {
    let path = chart().join("dashboards/hcp-ingress.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(dashboard["uid"], "hcp-ingress");
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut cells = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: duplicate panel id"
        );
        let grid = &panel["gridPos"];
        let (x, y, w, h) = (
            grid["x"].as_u64().unwrap(),
            grid["y"].as_u64().unwrap(),
            grid["w"].as_u64().unwrap(),
            grid["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24, "{title}: wider than the 24-column grid");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "{title}: overlaps another panel at ({cx}, {cy})"
                );
            }
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: data source variable"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            // Every $variable a query uses is defined (Grafana's own ones aside).
            for var in expr.split('$').skip(1) {
                let name: String = var
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    name.starts_with("__") || variables.contains(&name.as_str()),
                    "{title}: ${name} is not a dashboard variable"
                );
            }
        }
    }
}

/// A dashboard query as Grafana sends it: its variables replaced
/// (`$__rate_interval` by a duration, the job selectors by "any").
fn as_sent(expr: &str) -> String {
    let mut out = expr
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m");
    while let Some(at) = out.find('$') {
        let end = out[at + 1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(out.len(), |e| at + 1 + e);
        out.replace_range(at..end, ".*");
    }
    out
}

#[test]
fn every_query_parses_as_promql_and_names_what_the_extractor_finds() {
    let Some(tool) = crate::promql_tool() else {
        return;
    };
    let queries = crate::live::queries();
    let input: String = queries
        .iter()
        .map(|(_, e)| format!("{}\n", as_sent(e)))
        .collect();
    let mut child = std::process::Command::new(&tool)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), queries.len(), "one answer per query");
    for ((at, expr), line) in queries.iter().zip(&lines) {
        assert!(
            !line.starts_with("error:"),
            "{at}: Prometheus refuses {expr:?}: {line}"
        );
        let prometheus: std::collections::BTreeSet<String> =
            line.split_whitespace().map(str::to_string).collect();
        assert_eq!(
            crate::promql::metric_names(expr),
            prometheus,
            "{at}: test/chart/promql.rs reads other metric names than Prometheus in {expr:?}"
        );
    }
    // And a broken query is refused.
    let mut child = std::process::Command::new(&tool)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"sum(rate(x[5m])\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("error:"));
}

/// Run `script` (promqltest format) with `{{Alert}}` replaced by that
/// alert's expression: (passed, output, alerts used).
fn eval_alerts(tool: &std::path::Path, script: &str, name: &str) -> (bool, String, Vec<String>) {
    let rules = yaml_file(&chart().join("alerts/hcp-ingress.rules.yaml"));
    let exprs: BTreeMap<String, String> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Comments are dropped: they may name the placeholders.
    let script: String = script
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut used = Vec::new();
    let mut text = String::new();
    let mut rest = script.as_str();
    while let Some(at) = rest.find("{{") {
        let end = rest[at..].find("}}").expect("closed {{") + at;
        let alert = &rest[at + 2..end];
        let expr = exprs
            .get(alert)
            .unwrap_or_else(|| panic!("{name}: no alert {alert} in the rules file"));
        text.push_str(&rest[..at]);
        text.push_str(&format!("({expr})"));
        used.push(alert.to_string());
        rest = &rest[end + 2..];
    }
    text.push_str(rest);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}.promqltest", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(tool)
        .arg("eval")
        .arg(&path)
        .output()
        .unwrap();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), output, used)
}

#[test]
fn alerts_fire_on_what_they_are_for_and_not_on_healthy_series() {
    let Some(tool) = crate::promql_tool() else {
        return;
    };
    let script =
        std::fs::read_to_string(crate::root().join("test/chart/alerts.promqltest")).unwrap();
    let (passed, output, used) = eval_alerts(&tool, &script, "alerts");
    assert!(passed, "test/chart/alerts.promqltest failed:\n{output}");
    let rules = yaml_file(&chart().join("alerts/hcp-ingress.rules.yaml"));
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let alert = rule["alert"].as_str().unwrap();
            assert!(
                used.iter().any(|u| u == alert),
                "alert {alert} is evaluated nowhere in test/chart/alerts.promqltest"
            );
        }
    }
    // And the evaluation can fail: Paused=False must not fire.
    let wrong = "load 1m\n  hcp_ingress_controller_controlplaneingress_conditions{type=\"Paused\",status=\"False\",reason=\"NotPaused\"} 3+0x30\n\n\
                 eval instant at 20m {{HcpIngressConditionFalse}}\n  {type=\"Paused\",reason=\"NotPaused\"} 3\n";
    let (passed, output, _) = eval_alerts(&tool, wrong, "alerts-wrong");
    assert!(
        !passed,
        "an expectation the alert does not meet passed:\n{output}"
    );
}
