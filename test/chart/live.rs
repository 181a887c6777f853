//! The chart on a real kube-apiserver: its objects applied as `helm install`
//! would (server-side, strict field validation), the controller started from
//! the rendered Deployment's container (there is no kubelet: the binary runs
//! here with exactly those args and env, as the chart's ServiceAccount), and
//! the metric names of the dashboard and the alerts checked against what the
//! controller and the node proxy serve.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use hcp_ingress::api::ControlPlaneIngress;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{ci_values, helm, manager_container, of_kind, promql, root, single, strings, template};

/// Where ControlPlaneIngresses are created (the airgapped values watch it alone).
const TENANTS: &str = "tenants";
/// The label the airgapped values filter on (`--watch-filter`).
const SHARD_LABEL: &str = "hcp-ingress.dev/shard";

/// A folder for this test's files (logs, kubeconfig, proxy config), kept
/// after the run under the target folder for a look at the logs.
fn scratch() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A port the controller binds a moment later (see [`realkube::free_port`]).
fn free_port() -> u16 {
    realkube::free_port()
}

/// A real API server with the CRDs of the kinds the controller may watch
/// (sources and routes, `../shared/schemas`) and of the monitoring kinds.
async fn api_server(name: &str) -> realkube::Cluster {
    let cluster = realkube::Cluster::start(realkube::Options {
        name: name.into(),
        role: realkube::Role::Management,
        ..realkube::Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("a real API server for the test: {e}"));
    let monitoring = root().join("test/chart/monitoring-crds.yaml");
    let mut crds = vec![monitoring];
    let shared = root().join("../shared/schemas");
    let mut upstream: Vec<PathBuf> = std::fs::read_dir(&shared)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the upstream CRDs beside the repository)",
                shared.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    upstream.sort();
    crds.extend(upstream);
    for path in crds {
        let text = std::fs::read_to_string(&path).unwrap();
        cluster
            .apply_crds(&text)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    cluster
}

async fn create_namespace(client: &Client, name: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create Namespace {name}: {e}"),
    }
}

/// Apply the rendered objects as `helm install` would: CRDs first (and wait
/// until served), then everything else with server-side apply and strict
/// field validation (an unknown field is an error, not a silent drop).
async fn install(cluster: &realkube::Cluster, objects: &[Value], namespace: &str) {
    let client = cluster.admin_client();
    let mut namespaces: BTreeSet<String> = [namespace.to_string(), TENANTS.to_string()].into();
    namespaces.extend(
        objects
            .iter()
            .filter_map(|o| o["metadata"]["namespace"].as_str())
            .map(str::to_string),
    );
    for ns in namespaces {
        create_namespace(&client, &ns).await;
    }
    for crd in of_kind(objects, "CustomResourceDefinition") {
        cluster
            .apply_crds(&serde_json::to_string(crd).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for obj in objects
        .iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
    {
        let (group, version) = obj["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit_once('/')
            .unwrap_or(("", obj["apiVersion"].as_str().unwrap()));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, obj["kind"].as_str().unwrap());
        let (resource, caps) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{}: kind not served: {e}", gvk.kind));
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj["metadata"]["namespace"].as_str().unwrap_or(namespace),
                &resource,
            ),
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let name = obj["metadata"]["name"].as_str().unwrap();
        api.patch(
            name,
            &PatchParams::apply("helm").force().validation_strict(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", gvk.kind));
    }
}

/// A process this test started; SIGTERM on drop (then SIGKILL).
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &'static str, mut cmd: Command, dir: &Path) -> Process {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Process { name, child, log }
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Fail with the log when the process has ended.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}); its log ends with:\n{}",
                self.name,
                self.log()
            );
        }
    }

    /// SIGTERM, and the exit status once it has drained.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "{} did not stop within 30 s of SIGTERM:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One HTTP/1.1 GET on loopback: (status, body), or `None` when nothing answers.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Poll `check` every 100 ms until it returns Some, failing after `secs`
/// with `what` and the process's log (which is checked to be alive).
async fn wait_for<T, F, Fut>(process: &mut Process, secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        process.assert_running();
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}; {} log:\n{}",
            process.name,
            process.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The controller as the rendered Deployment runs it: the container's args
/// and env (the pod-only fieldRefs filled in as the kubelet would), and the
/// API credentials of the chart's ServiceAccount in place of the in-cluster
/// ones (`KUBECONFIG`: the only variable not from the Deployment).
async fn start_controller(
    cluster: &realkube::Cluster,
    objects: &[Value],
    namespace: &str,
    dir: &Path,
) -> (Process, String) {
    let deployment = single(objects, "Deployment");
    let pod_name = format!(
        "{}-6d4cf56db6-x7k2p",
        deployment["metadata"]["name"].as_str().unwrap()
    );
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    let token = cluster
        .service_account_token(namespace, service_account)
        .await;
    let kubeconfig = dir.join("controller.kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig_for("controller", &token)).unwrap();

    let container = manager_container(objects);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-ingress"));
    cmd.args(strings(&container["args"])).env_clear();
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap();
        let value = match (&var["value"], &var["valueFrom"]["fieldRef"]["fieldPath"]) {
            (Value::String(v), _) => v.clone(),
            (_, Value::String(field)) => match field.as_str() {
                "metadata.namespace" => namespace.to_string(),
                "metadata.name" => pod_name.clone(),
                other => panic!("env {name}: fieldRef {other} has no stand-in in this test"),
            },
            _ => panic!("env {name}: neither a value nor a fieldRef"),
        };
        cmd.env(name, value);
    }
    cmd.env("KUBECONFIG", &kubeconfig);
    let user = format!("system:serviceaccount:{namespace}:{service_account}");
    (Process::spawn("controller", cmd, dir), user)
}

/// The port of a container port by name.
fn container_port(objects: &[Value], name: &str) -> u16 {
    manager_container(objects)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port {name}"))["containerPort"]
        .as_u64()
        .unwrap() as u16
}

/// A ControlPlaneIngress for cluster `name`: without `<name>-kubeconfig` the
/// management side converges and the workload side reports WorkloadReachable=False.
fn cpi(name: &str) -> ControlPlaneIngress {
    serde_json::from_value(json!({
        "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": name, "namespace": TENANTS, "labels": {SHARD_LABEL: "a"}},
        "spec": {"clusterName": name, "ingress": {"apiHost": format!("api.{name}.example.com"), "className": "haproxy"},
                 "backend": {"serviceName": format!("kmc-{name}"), "apiPort": 30443},
                 // No DNS lookup of the example host from the node proxy's config.
                 "proxy": {"upstreams": ["192.0.2.10"]}}
    }))
    .unwrap()
}

/// Create `name` and wait until the controller has reconciled it: its status
/// describes the current generation and carries a Ready condition.
async fn create_and_wait_reconciled(
    client: &Client,
    controller: &mut Process,
    name: &str,
) -> ControlPlaneIngress {
    let api: Api<ControlPlaneIngress> = Api::namespaced(client.clone(), TENANTS);
    api.create(&PostParams::default(), &cpi(name))
        .await
        .unwrap();
    wait_for(
        controller,
        90,
        &format!("a reconcile of ControlPlaneIngress {TENANTS}/{name}"),
        || {
            let api = api.clone();
            async move {
                let cpi = api.get(name).await.ok()?;
                let status = cpi.status.as_ref()?;
                (status.observed_generation == cpi.metadata.generation
                    && status.conditions.iter().any(|c| c.type_ == "Ready"))
                .then_some(cpi)
            }
        },
    )
    .await
}

/// Render `values` with free health and metrics ports (the Deployment's
/// 9440/8443 may be taken on a shared machine: set as values, so the args
/// are still exactly the rendered ones).
fn render(release: &str, namespace: &str, values: &str) -> Vec<Value> {
    let helm = helm().expect("checked by the caller");
    let sets = vec![
        format!("healthPort={}", free_port()),
        format!("metrics.port={}", free_port()),
    ];
    template(&helm, release, namespace, &[values], &sets)
        .unwrap_or_else(|e| panic!("helm template --values {values}: {e}"))
}

/// kubectl as the test's admin (the kubeconfig realkube writes for itself).
fn kubectl(cluster: &realkube::Cluster, args: &[&str]) -> String {
    let kubeconfig = cluster.dir().join("admin.kubeconfig");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl get cpi`: the columns say something before and after convergence.
fn check_columns(cluster: &realkube::Cluster, cpi: &ControlPlaneIngress) {
    let name = cpi.metadata.name.as_deref().unwrap();
    let ready = cpi
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    let table = kubectl(cluster, &["get", "cpi", "-n", TENANTS, name]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "CLUSTER", "API", "HOST", "FLAVOR", "READY", "REASON", "PROXY", "NODES", "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[0], name, "{table}");
    assert_eq!(row[3], "haproxy", "Flavor: {table}");
    assert_eq!(row[4], ready.status, "Ready: {table}");
    assert_eq!(row[5], ready.reason, "Reason: {table}");
    assert!(!ready.reason.is_empty());
    let wide = kubectl(cluster, &["get", "cpi", "-n", TENANTS, name, "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("MESSAGE"), "{wide}");
    assert!(
        wide.contains(&ready.message[..ready.message.len().min(30)]),
        "the wide view shows the Ready message: {wide}"
    );
    let describe = kubectl(cluster, &["describe", "cpi", "-n", TENANTS, name]);
    for want in [
        "Conditions:",
        "Type:                  Ready",
        &ready.reason,
        "WorkloadReachable",
        "Endpoint:",
    ] {
        assert!(
            describe.contains(want),
            "kubectl describe lacks {want:?}:\n{describe}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ci_values_file_installs_and_the_controller_runs_from_it() {
    if helm().is_none() {
        return;
    }
    let cluster = api_server("chart").await;
    let client = cluster.admin_client();
    let dir = scratch();
    let mut users = Vec::new();
    for values in ci_values() {
        let stem = values
            .trim_start_matches("ci/")
            .trim_end_matches("-values.yaml");
        let (release, namespace) = (format!("hcp-{stem}"), format!("hcp-{stem}-system"));
        let objects = render(&release, &namespace, &values);
        install(&cluster, &objects, &namespace).await;

        let (mut controller, user) = start_controller(&cluster, &objects, &namespace, &dir).await;
        let health = container_port(&objects, "healthz");
        wait_for(
            &mut controller,
            60,
            &format!("{values}: /readyz"),
            || async { matches!(http_get(health, "/readyz").await, Some((200, _))).then_some(()) },
        )
        .await;
        let cpi =
            create_and_wait_reconciled(&client, &mut controller, &format!("cpi-{stem}")).await;
        if stem == "defaults" {
            check_columns(&cluster, &cpi);
        }
        let status = controller.terminate();
        assert!(
            status.success(),
            "{values}: the controller exits 0 on SIGTERM: {status}\n{}",
            controller.log()
        );
        assert!(
            !cluster.requests_by(&user).is_empty(),
            "{values}: no request of {user} in the audit log: the controller did not run as the chart's ServiceAccount"
        );
        users.push((values, user));
    }
    for (values, user) in users {
        let rejected = cluster.rejections_of(&user);
        assert!(
            rejected.is_empty(),
            "{values}: the API server rejected requests of {user} (the chart's RBAC is short): {rejected:#?}"
        );
    }
}

/// Write a serving certificate valid for `days` (tls.crt, tls.key) and the
/// upstream CA (ca.crt) into `dir`; returns its `notAfter`, Unix seconds.
fn write_certificates(dir: &Path, days: i64) -> i64 {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut leaf =
        rcgen::CertificateParams::new(vec!["kubernetes.default.svc".to_string()]).unwrap();
    let not_after = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap()
        + time::Duration::days(days);
    leaf.not_after = not_after;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    // The key first: the proxy reloads on a change of either file, and
    // must never pair the new certificate with the old key.
    for (file, text) in [
        ("ca.crt", ca_cert.pem()),
        ("tls.key", leaf_key.serialize_pem()),
        ("tls.crt", leaf_cert.pem()),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
    }
    not_after.unix_timestamp()
}

/// A minimal node proxy: reencrypt mode on loopback with a fresh leaf, an
/// upstream port nothing listens on (so the upstream health series exist).
fn start_proxy(dir: &Path) -> (Process, u16, i64) {
    let not_after = write_certificates(dir, 3);
    let admin = free_port();
    let config = format!(
        "listen: {{address: \"127.0.0.1\", port: {listen}, interface: lo}}\n\
         mode: reencrypt\n\
         upstream:\n  serverName: api.tenant.example.com\n  port: {upstream}\n  addresses: [\"127.0.0.1\"]\n  caFile: {dir}/ca.crt\n  healthCheck: {{interval: 200ms, timeout: 1s}}\n\
         tls: {{certFile: {dir}/tls.crt, keyFile: {dir}/tls.key}}\n\
         admin: {{address: \"127.0.0.1:{admin}\"}}\n",
        listen = free_port(),
        upstream = free_port(),
        dir = dir.display(),
    );
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-ingress"));
    cmd.arg("proxy").arg("--config").arg(&path);
    (Process::spawn("proxy", cmd, dir), admin, not_after)
}

/// Every PromQL expression of the dashboard (panel targets) and the alerts,
/// with where it comes from.
pub fn queries() -> Vec<(String, String)> {
    let chart = crate::chart();
    let mut found = Vec::new();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(chart.join("dashboards/hcp-ingress.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    fn panels(v: &Value, out: &mut Vec<(String, String)>) {
        for p in v["panels"].as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((
                        format!("dashboard panel {:?}", p["title"]),
                        expr.to_string(),
                    ));
                }
            }
            panels(p, out);
        }
    }
    panels(&dashboard, &mut found);
    let rules = crate::yaml_file(&chart.join("alerts/hcp-ingress.rules.yaml"));
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).unwrap();
            found.push((
                format!("alert {name}"),
                rule["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    assert!(found.len() > 20, "too few queries found: {found:?}");
    found
}

/// Names used by `queries` that `exported` lacks: (where, name).
fn unknown_names(
    queries: &[(String, String)],
    exported: &BTreeSet<String>,
) -> Vec<(String, String)> {
    queries
        .iter()
        .flat_map(|(at, expr)| {
            promql::metric_names(expr)
                .into_iter()
                .filter(|n| !exported.contains(n))
                .map(|n| (at.clone(), n))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_name_only_metrics_the_binaries_export() {
    if helm().is_none() {
        return;
    }
    let cluster = api_server("metrics").await;
    let dir = scratch();
    let namespace = "hcp-ingress-system";
    let objects = render("hcp-ingress", namespace, "ci/monitoring-values.yaml");
    install(&cluster, &objects, namespace).await;
    // tenant-01 has a workload cluster (its kubeconfig and CA Secrets, as
    // CAPI writes them), so the controller mints its node proxy certificate;
    // tenant-02 has none and stays WorkloadReachable=False.
    let workload = realkube::Cluster::start(realkube::Options {
        name: "workload".into(),
        ..realkube::Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("a real workload API server: {e}"));
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(cluster.admin_client(), TENANTS);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    for secret in [
        json!({"metadata": {"name": "tenant-01-kubeconfig"}, "stringData": {"value": workload.kubeconfig_yaml()}}),
        json!({"metadata": {"name": "tenant-01-ca"}, "type": "kubernetes.io/tls",
               "stringData": {"tls.crt": ca_cert.pem(), "tls.key": ca_key.serialize_pem()}}),
    ] {
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(secret).unwrap(),
            )
            .await
            .unwrap();
    }

    let (mut controller, _) = start_controller(&cluster, &objects, namespace, &dir).await;
    let metrics_port = container_port(&objects, "metrics");
    for name in ["tenant-01", "tenant-02"] {
        create_and_wait_reconciled(&cluster.admin_client(), &mut controller, name).await;
    }
    // The condition gauge counts what the watch cache holds, the certificate
    // gauge what the workload side minted: wait for both.
    let controller_text = wait_for(&mut controller, 60, "the condition counts and the certificate expiry on /metrics", || async {
        let (status, body) = http_get(metrics_port, "/metrics").await?;
        let unreachable = body.lines().any(|l| {
            l.starts_with("hcp_ingress_controller_controlplaneingress_conditions{")
                && l.contains("type=\"WorkloadReachable\"")
                && l.contains("status=\"False\"")
                && l.ends_with(" 1")
        });
        let certificate = body.lines().any(|l| {
            l.starts_with("hcp_ingress_controller_proxy_certificate_expiry_timestamp_seconds{controlplaneingress=\"tenants/tenant-01\"} ")
        });
        (status == 200 && unreachable && certificate).then_some(body)
    })
    .await;

    // The minted leaf lives 7 days (the default of --cert-validity-days).
    let minted: i64 = controller_text
        .lines()
        .find_map(|l| l.strip_prefix("hcp_ingress_controller_proxy_certificate_expiry_timestamp_seconds{controlplaneingress=\"tenants/tenant-01\"} "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the certificate expiry is a number");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    assert!(
        (now + 6 * 86400..now + 8 * 86400).contains(&minted),
        "the node proxy certificate of tenant-01 expires at {minted}, not about 7 days from {now}"
    );

    let (mut proxy, admin, not_after) = start_proxy(&dir);
    let proxy_text = wait_for(&mut proxy, 30, "the proxy's /metrics", || async {
        let (status, body) = http_get(admin, "/metrics").await?;
        (status == 200 && body.contains("hcp_proxy_upstream_healthy{")).then_some(body)
    })
    .await;
    let expiry: Vec<&str> = proxy_text
        .lines()
        .filter(|l| l.starts_with("hcp_proxy_certificate_expiry_timestamp_seconds"))
        .collect();
    assert_eq!(
        expiry,
        [format!(
            "hcp_proxy_certificate_expiry_timestamp_seconds{{file=\"{}\"}} {not_after}",
            dir.join("tls.crt").display()
        )],
        "the proxy exports its serving certificate's notAfter"
    );

    // A renewed certificate: the gauge follows the live reload.
    let renewed = write_certificates(&dir, 5);
    let want = format!("{} {renewed}", expiry[0].rsplit_once(' ').unwrap().0);
    wait_for(
        &mut proxy,
        30,
        "the renewed certificate's expiry on /metrics",
        || async {
            let (_, body) = http_get(admin, "/metrics").await?;
            body.lines().any(|l| l == want).then_some(())
        },
    )
    .await;

    let mut exported = promql::exported_names(&controller_text);
    exported.extend(promql::exported_names(&proxy_text));
    let queries = queries();
    let unknown = unknown_names(&queries, &exported);
    assert!(
        unknown.is_empty(),
        "queries name metrics neither binary exports: {unknown:#?}\nexported: {exported:#?}"
    );
    // Every metric family either binary exports has a panel or an alert: a
    // new metric must be shown somewhere.
    let used: BTreeSet<String> = queries
        .iter()
        .flat_map(|(_, e)| promql::metric_names(e))
        .collect();
    let families: BTreeMap<String, ()> = controller_text
        .lines()
        .chain(proxy_text.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| (n.to_string(), ()))
        .collect();
    let unshown: Vec<&String> = families
        .keys()
        .filter(|f| !used.iter().any(|u| u.starts_with(f.as_str())))
        .collect();
    assert!(
        unshown.is_empty(),
        "metrics in no dashboard panel and no alert: {unshown:?}"
    );
    // And the check can fail: a misspelt name is caught.
    let misspelt = [(
        "probe".to_string(),
        "rate(hcp_proxy_handshake_error_total[5m])".to_string(),
    )];
    assert_eq!(unknown_names(&misspelt, &exported).len(), 1);

    assert!(proxy.terminate().success(), "the proxy exits 0 on SIGTERM");
    assert!(
        controller.terminate().success(),
        "the controller exits 0 on SIGTERM"
    );
}
