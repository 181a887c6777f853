//! `hcp-ingress doctor` against a converged tenant: real management and
//! workload API servers, the real controller (stopped once converged, so an
//! injected fault stays), a real DNS server (dnsmasq) and a TLS server with
//! an rcgen certificate standing in for the shared ingress, all on loopback.
//! The doctor passes on the healthy setup and names each injected fault,
//! with its fix, exiting 1.

use std::{
    net::SocketAddr,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use hcp_ingress::{
    doctor::{self, Options, Resolver, Target, Verdict},
    render::RouteKind,
};
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::Endpoints,
    discovery::v1::EndpointSlice,
};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};
use serde_json::json;
use tokio::net::TcpListener;

use crate::{
    harness::*,
    workload::{CA_CRT, CA_KEY, CLUSTER, connect, workload_cluster},
};

const HOST: &str = "api.wl.example.com";
/// The route the controller makes for the ControlPlaneIngress `CLUSTER`.
const ROUTE: &str = "hcp-ingress-wl";
/// Where the stand-in ingress listens, and what its route's status reports.
const INGRESS_IP: &str = "127.0.0.1";
/// Somewhere else on loopback, where nothing listens: the "wrong" DNS answer.
const ELSEWHERE_IP: &str = "127.0.0.2";

/// A TLS server standing in for the shared SNI-passthrough ingress: it
/// presents the certificate of the moment and records the SNI it was asked for.
struct StandInIngress {
    address: SocketAddr,
    config: Arc<Mutex<Arc<ServerConfig>>>,
    server_names: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StandInIngress {
    async fn start(sans: &[&str], signer: Signer) -> StandInIngress {
        let listener = TcpListener::bind((INGRESS_IP, 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let config = Arc::new(Mutex::new(server_config(sans, signer)));
        let server_names = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (config, server_names) = (config.clone(), server_names.clone());
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    let acceptor = tokio_rustls::TlsAcceptor::from(config.lock().unwrap().clone());
                    let server_names = server_names.clone();
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(tcp).await
                            && let Some(name) = tls.get_ref().1.server_name()
                        {
                            server_names.lock().unwrap().push(name.to_string());
                        }
                    });
                }
            }
        });
        StandInIngress {
            address,
            config,
            server_names,
            task,
        }
    }

    /// Present a certificate with these SANs, signed by `signer`, from now on.
    fn present(&self, sans: &[&str], signer: Signer) {
        *self.config.lock().unwrap() = server_config(sans, signer);
    }
}

impl Drop for StandInIngress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Who signs the stand-in ingress's certificate.
#[derive(Clone, Copy)]
enum Signer {
    /// The cluster CA (`<cluster>-ca`): the tenant API server's own
    /// certificate, as SSL passthrough delivers it.
    ClusterCa,
    /// Self-signed: the ingress answering with a certificate of its own.
    Ingress,
}

fn server_config(sans: &[&str], signer: Signer) -> Arc<ServerConfig> {
    let now = std::time::SystemTime::now();
    // A serving certificate's usual life, so the expiry the doctor reports is plausible.
    let life = Duration::from_secs(90 * 86_400);
    let (cert_pem, key_pem) = match signer {
        Signer::ClusterCa => {
            let ca = hcp_ingress::pki::CertificateAuthority::from_pem(CA_CRT, CA_KEY).unwrap();
            let leaf = hcp_ingress::pki::mint_leaf(
                &ca,
                &hcp_ingress::pki::LeafSpec {
                    dns_names: sans.iter().map(|s| s.to_string()).collect(),
                    ip_addresses: Vec::new(),
                    validity: life,
                    now,
                },
            )
            .unwrap();
            (leaf.cert_pem.clone(), leaf.key_pem.clone())
        }
        Signer::Ingress => {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(
                sans.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
            .unwrap();
            params.not_before = (now - Duration::from_secs(3600)).into();
            params.not_after = (now + life).into();
            (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
        }
    };
    let config = ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()],
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
    )
    .unwrap();
    Arc::new(config)
}

/// A real DNS server (dnsmasq) on loopback that answers `host` with `ip`
/// and refuses every other name; stopped when dropped.
struct Dnsmasq {
    address: SocketAddr,
    _child: tokio::process::Child,
}

impl Dnsmasq {
    async fn start(host: &str, ip: &str) -> Dnsmasq {
        let binary = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq", "/sbin/dnsmasq"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("dnsmasq is installed (Debian dnsmasq-base; hack/install-test-deps.sh)");
        let want: std::net::IpAddr = ip.parse().unwrap();
        // A port is picked free and released for dnsmasq, so another
        // process can take it meanwhile: then dnsmasq exits, and another
        // port is tried.
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let mut child = tokio::process::Command::new(binary)
                .args([
                    "--keep-in-foreground",
                    "--conf-file=/dev/null",
                    "--no-resolv",
                    "--no-hosts",
                    "--bind-interfaces",
                    "--pid-file=",
                    &format!("--listen-address={INGRESS_IP}"),
                    &format!("--port={port}"),
                    &format!("--address=/{host}/{ip}"),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("dnsmasq starts");
            let address: SocketAddr =
                (INGRESS_IP.parse::<std::net::IpAddr>().unwrap(), port).into();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    let mut stderr = String::new();
                    if let Some(mut pipe) = child.stderr.take() {
                        use tokio::io::AsyncReadExt;
                        let _ = pipe.read_to_string(&mut stderr).await;
                    }
                    failures.push(format!("port {port}: dnsmasq exited ({status}): {stderr}"));
                    break;
                }
                let answer = doctor::probe::resolve(
                    Resolver::Server(address),
                    host,
                    Duration::from_millis(300),
                )
                .await;
                if answer.as_ref().is_ok_and(|ips| ips.contains(&want)) {
                    return Dnsmasq {
                        address,
                        _child: child,
                    };
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "dnsmasq on {address} never answered {host}: last {answer:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("dnsmasq did not start: {failures:#?}");
    }
}

/// A loopback port free for both UDP and TCP (dnsmasq binds both) when asked.
fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind((INGRESS_IP, 0)).unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind((INGRESS_IP, port)).is_ok() {
            return port;
        }
    }
}

/// One run of the built binary, as a user types it.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The row of `check`, failing the test when there is none.
    fn row(&self, check: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.split(" | ").next().map(str::trim) == Some(check))
            .unwrap_or_else(|| panic!("no row {check:?} in:\n{}", self.stdout))
    }

    /// Rows whose result is FAIL, by check name.
    fn failed(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.split(" | ").nth(1).map(str::trim) == Some("FAIL"))
            .map(|l| l.split(" | ").next().unwrap().trim())
            .collect()
    }
}

async fn doctor_binary(args: &[&str], secrets: &[&str]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .arg("doctor")
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("hcp-ingress runs");
    let run = Run {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    for secret in secrets {
        assert!(
            !run.stdout.contains(secret) && !run.stderr.contains(secret),
            "a kubeconfig credential was printed:\n{}{}",
            run.stdout,
            run.stderr
        );
    }
    run
}

fn token_of(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("the test kubeconfigs authenticate with a token")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_converged_tenant_and_names_each_fault_with_its_fix() {
    let ingress = StandInIngress::start(&[HOST], Signer::ClusterCa).await;
    let dns = Dnsmasq::start(HOST, INGRESS_IP).await;

    // A converged tenant: the real controller installs everything.
    let m = management(&[]).await;
    let w = workload_cluster().await;
    connect(&m, &w).await;
    let running = m.start();
    apply_value(
        &m.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": CLUSTER, "namespace": NS},
            "spec": {"clusterName": CLUSTER,
                     "ingress": {"apiHost": HOST, "className": "haproxy", "port": ingress.address.port()},
                     "backend": {"serviceName": "kmc-wl", "apiPort": 30443}}}),
    )
    .await;
    // What the ingress controller and the kubelets would report.
    let ingresses = routes(&m.client, RouteKind::Ingress);
    eventually("the Ingress", || async {
        ingresses.get_opt(ROUTE).await.ok()?
    })
    .await;
    ingresses
        .patch_status(
            ROUTE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": INGRESS_IP}]}}})),
        )
        .await
        .unwrap();
    let daemon_sets: Api<DaemonSet> = Api::namespaced(w.client(), "kube-system");
    eventually("the proxy DaemonSet", || async {
        daemon_sets.get_opt("hcp-ingress-proxy").await.ok()?
    })
    .await;
    daemon_sets
        .patch_status(
            "hcp-ingress-proxy",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"desiredNumberScheduled": 2, "numberReady": 2,
                "currentNumberScheduled": 2, "numberMisscheduled": 0}}),
            ),
        )
        .await
        .unwrap();
    for condition in [
        "EndpointsSteered",
        "CCMConfigured",
        "ProxyReady",
        "RouteReady",
    ] {
        wait_condition(&m.client, CLUSTER, condition, "True").await;
    }
    // Stopped, so nothing repairs the faults injected below.
    running.stop().await;

    let scratch = Scratch::new();
    let dir = scratch.0.clone();
    let management_kubeconfig = dir.join("management.kubeconfig");
    std::fs::write(&management_kubeconfig, m.api.kubeconfig_yaml()).unwrap();
    let secrets = [
        token_of(&m.api.kubeconfig_yaml()),
        token_of(&w.kubeconfig_yaml()),
    ];
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let dns_flag = dns.address.to_string();
    let kubeconfig_flag = management_kubeconfig.display().to_string();
    let args = |dns_server: &str| {
        vec![
            CLUSTER.to_string(),
            "-n".into(),
            NS.into(),
            "--kubeconfig".into(),
            kubeconfig_flag.clone(),
            "--dns-server".into(),
            dns_server.to_string(),
            "--timeout".into(),
            "3".into(),
        ]
    };
    let run_doctor = |dns_server: String| {
        let args = args(&dns_server);
        let secrets = secrets.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            doctor_binary(&args, &secrets).await
        }
    };

    // Healthy: the library call, every hop passes...
    let (_, report) = doctor::diagnose(
        &m.client,
        &Options {
            target: Target::Cluster {
                namespace: None,
                cluster: CLUSTER.into(),
            },
            resolver: Resolver::Server(dns.address),
            ingress_address: Vec::new(),
            workload_kubeconfig: None,
            timeout: Duration::from_secs(3),
        },
    )
    .await
    .unwrap();
    let verdicts: Vec<(&str, Verdict)> = report
        .iter()
        .map(|c| (c.name.as_str(), c.verdict))
        .collect();
    for name in [
        "dns api.wl.example.com",
        "route Ingress hcp-ingress-wl",
        "tls api.wl.example.com",
        "workload api",
        "steering",
        "node proxy",
        "ccm env",
    ] {
        assert!(
            verdicts.contains(&(name, Verdict::Pass)),
            "{name} must pass: {report:#?}"
        );
    }
    assert!(
        ingress
            .server_names
            .lock()
            .unwrap()
            .iter()
            .any(|n| n == HOST),
        "the TLS check dialled the ingress with SNI {HOST}"
    );
    // ... and the binary, as a user runs it, says so and exits 0.
    let healthy = run_doctor(dns_flag.clone()).await;
    assert_eq!(healthy.code, 0, "{}{}", healthy.stdout, healthy.stderr);
    assert!(healthy.failed().is_empty(), "{}", healthy.stdout);
    assert!(
        healthy
            .row("tls api.wl.example.com")
            .contains("issued by the cluster CA (Secret tenants/wl-ca)"),
        "{}",
        healthy.stdout
    );
    println!("healthy:\n{}", healthy.stdout);

    // Fault 1, wrong DNS: the host resolves elsewhere.
    let wrong = Dnsmasq::start(HOST, ELSEWHERE_IP).await;
    let run = run_doctor(wrong.address.to_string()).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.failed(), ["dns api.wl.example.com"], "{}", run.stdout);
    assert!(
        run.row("dns api.wl.example.com").contains(&format!(
            "resolves to {ELSEWHERE_IP}, but the shared ingress is {INGRESS_IP}"
        )) && run
            .row("dns api.wl.example.com")
            .contains("point the DNS record of api.wl.example.com at 127.0.0.1"),
        "{}",
        run.stdout
    );
    println!("wrong DNS:\n{}", run.stdout);
    drop(wrong);

    // Fault 2, SAN missing: the certificate served for the host does not name it.
    ingress.present(&["kmc-wl.tenants.svc"], Signer::ClusterCa);
    let run = run_doctor(dns_flag.clone()).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.failed(), ["tls api.wl.example.com"], "{}", run.stdout);
    assert!(
        run.row("tls api.wl.example.com")
            .contains("SANs DNS:kmc-wl.tenants.svc) that does not name api.wl.example.com")
            && run.row("tls api.wl.example.com").contains("certSANs"),
        "{}",
        run.stdout
    );
    println!("SAN missing:\n{}", run.stdout);
    ingress.present(&[HOST], Signer::ClusterCa);

    // Fault 2b, the ingress's own certificate: it names the host, but the
    // ingress terminates TLS instead of passing the tenant's through.
    ingress.present(&[HOST], Signer::Ingress);
    let run = run_doctor(dns_flag.clone()).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.failed(), ["tls api.wl.example.com"], "{}", run.stdout);
    assert!(
        run.row("tls api.wl.example.com")
            .contains("does not verify against the cluster CA")
            && run
                .row("tls api.wl.example.com")
                .contains("Secret tenants/wl-ca")
            && run
                .row("tls api.wl.example.com")
                .contains("turn SSL passthrough on for the route"),
        "{}",
        run.stdout
    );
    println!("ingress's own certificate:\n{}", run.stdout);
    ingress.present(&[HOST], Signer::ClusterCa);

    // Fault 3, endpoints not steered: reset to the API server's own address.
    let endpoints: Api<Endpoints> = Api::namespaced(w.client(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(w.client(), "default");
    let steered_endpoints = endpoints.get("kubernetes").await.unwrap();
    let steered_slice = slices.get("kubernetes").await.unwrap();
    endpoints
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(json!({"subsets": [{"addresses": [{"ip": "10.0.0.5"}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]})),
        )
        .await
        .unwrap();
    slices
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}),
            ),
        )
        .await
        .unwrap();
    let run = run_doctor(dns_flag.clone()).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.failed(), ["steering"], "{}", run.stdout);
    let row = run.row("steering");
    assert!(
        row.contains("not steered")
            && row.contains("Endpoints default/kubernetes holds ([\"10.0.0.5\"], [6443]), not ([\"240.0.0.1\"], [443])")
            && row.contains("--endpoint-reconciler-type=none"),
        "{row}"
    );
    println!("endpoints not steered:\n{}", run.stdout);
    // Undone as the controller left them.
    endpoints
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(json!({"subsets": steered_endpoints.subsets})),
        )
        .await
        .unwrap();
    slices
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"endpoints": steered_slice.endpoints, "ports": steered_slice.ports}),
            ),
        )
        .await
        .unwrap();

    // Fault 4, CCM env missing: the env the controller set is removed.
    let deployments: Api<Deployment> = Api::namespaced(w.client(), "kube-system");
    let mut ccm = deployments.get("cloud-controller-manager").await.unwrap();
    let env_before = ccm
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone();
    ccm.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .env = Some(
        env_before
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| !e.name.starts_with("KUBERNETES_SERVICE_"))
            .collect(),
    );
    ccm.metadata.managed_fields = None;
    deployments
        .replace("cloud-controller-manager", &PostParams::default(), &ccm)
        .await
        .unwrap();
    let run = run_doctor(dns_flag.clone()).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(run.failed(), ["ccm env"], "{}", run.stdout);
    assert!(
        run.row("ccm env").contains(
            "Deployment kube-system/cloud-controller-manager spec.template.spec.containers[name=ccm].env: KUBERNETES_SERVICE_HOST missing (want api.wl.example.com)"
        ),
        "{}",
        run.stdout
    );
    println!("CCM env missing:\n{}", run.stdout);
    let mut ccm = deployments.get("cloud-controller-manager").await.unwrap();
    ccm.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .env = env_before;
    ccm.metadata.managed_fields = None;
    deployments
        .replace("cloud-controller-manager", &PostParams::default(), &ccm)
        .await
        .unwrap();

    // Back to healthy: the faults above were undone, nothing else was broken.
    let run = run_doctor(dns_flag.clone()).await;
    assert_eq!(run.code, 0, "{}", run.stdout);

    // Fault 5, no route: the Ingress is deleted.
    ingresses
        .delete(ROUTE, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Ingress to be gone", || async {
        ingresses
            .get_opt(ROUTE)
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    let run = run_doctor(dns_flag.clone()).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(
        run.failed(),
        ["route Ingress hcp-ingress-wl"],
        "{}",
        run.stdout
    );
    assert!(
        run.row("route Ingress hcp-ingress-wl")
            .contains("Ingress tenants/hcp-ingress-wl does not exist: the controller creates it"),
        "{}",
        run.stdout
    );
    println!("no route:\n{}", run.stdout);

    // The same tenant by cluster name, with the ingress address and the
    // workload kubeconfig given as flags: DNS is compared with the flag's
    // address again, the workload is reached through the file.
    let workload_kubeconfig = dir.join("workload.kubeconfig");
    std::fs::write(&workload_kubeconfig, w.kubeconfig_yaml()).unwrap();
    let run = doctor_binary(
        &[
            "--cluster",
            CLUSTER,
            "--kubeconfig",
            &kubeconfig_flag,
            "--dns-server",
            &dns_flag,
            "--ingress-address",
            INGRESS_IP,
            "--workload-kubeconfig",
            &workload_kubeconfig.display().to_string(),
        ],
        &secrets,
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(
        run.failed(),
        ["route Ingress hcp-ingress-wl"],
        "{}",
        run.stdout
    );
    assert!(
        run.row("dns api.wl.example.com")
            .contains("resolves to 127.0.0.1, the shared ingress (--ingress-address)"),
        "{}",
        run.stdout
    );
    assert!(
        run.row("workload api")
            .contains("answers through --workload-kubeconfig"),
        "{}",
        run.stdout
    );

    // A broken workload kubeconfig: one failed row, the workload checks
    // skipped, and nothing of the file in the output (parser errors quote it).
    let secret = "c2VjcmV0LXRva2VuLW5ldmVyLXByaW50ZWQ";
    let broken = dir.join("broken.kubeconfig");
    std::fs::write(
        &broken,
        format!("apiVersion: v1\nusers:\n- name: x\n  user: {{token: {secret}\n"),
    )
    .unwrap();
    let mut with_broken = secrets.clone();
    with_broken.push(secret);
    let run = doctor_binary(
        &[
            CLUSTER,
            "-n",
            NS,
            "--kubeconfig",
            &kubeconfig_flag,
            "--dns-server",
            &dns_flag,
            "--workload-kubeconfig",
            &broken.display().to_string(),
        ],
        &with_broken,
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.failed().contains(&"workload api"), "{}", run.stdout);
    println!("broken workload kubeconfig:\n{}", run.stdout);
    for check in ["steering", "node proxy", "ccm env", "konnectivity"] {
        assert!(run.row(check).contains("| SKIP "), "{}", run.stdout);
    }

    // Bad input: no such ControlPlaneIngress, or no cluster of that name.
    let run = doctor_binary(
        &["nope", "-n", NS, "--kubeconfig", &kubeconfig_flag],
        &secrets,
    )
    .await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("not found: ControlPlaneIngress tenants/nope"),
        "{}",
        run.stderr
    );
    let run = doctor_binary(
        &["--cluster", "nope", "--kubeconfig", &kubeconfig_flag],
        &secrets,
    )
    .await;
    assert_eq!(run.code, 2, "{}", run.stderr);
}

/// A directory for the test's kubeconfig files, removed when the test ends,
/// failed or not (they hold the test clusters' tokens).
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("hcp-ingress-doctor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `steering` check looks past the Service's fields to its endpoints:
/// with service steering and the proxy pods in `kube-system` (where
/// hcp-ingress used to install them) the Service's fields are all as wanted
/// but it selects nothing, which the doctor must fail; with the pods in
/// `default`, next to the Service, kube-controller-manager makes them its
/// endpoints and the check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_fails_a_service_selector_that_reaches_no_proxy_pod() {
    use hcp_ingress::render::workload::{own_labels, selector_labels};
    use k8s_openapi::api::core::v1::{Pod, Service};

    let m = management(&[]).await;
    let w = Server::start_real(realkube::Options {
        name: "doctor-steering".into(),
        controller_manager: true,
        endpoint_reconciler: "none".into(),
        ..realkube::Options::default()
    })
    .await;
    let wc = w.client();
    w.real().add_node("node-0").await.unwrap();
    connect(&m, &w).await;
    apply_value(
        &m.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": CLUSTER, "namespace": NS},
            "spec": {"clusterName": CLUSTER,
                     "ingress": {"apiHost": HOST, "className": "haproxy"},
                     "backend": {"serviceName": "kmc-wl", "apiPort": 30443},
                     "proxy": {"steering": "service"}}}),
    )
    .await;
    // Service steering as the controller writes it.
    Api::<Service>::namespaced(wc.clone(), "default")
        .patch(
            "kubernetes",
            &PatchParams::apply("hcp-ingress").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default"},
                "spec": {"selector": selector_labels(), "internalTrafficPolicy": "Local",
                         "publishNotReadyAddresses": true}})),
        )
        .await
        .unwrap();
    // A running, ready proxy pod in `namespace`, as the DaemonSet and the
    // kubelet would leave it.
    let proxy_pod = async |namespace: &str| {
        let pods: Api<Pod> = Api::namespaced(wc.clone(), namespace);
        let name = "hcp-ingress-proxy-x7k2p";
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name, "labels": own_labels()},
                "spec": {"nodeName": "node-0", "hostNetwork": true,
                         "containers": [{"name": "proxy", "image": "registry.example/hcp-ingress:v1"}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.0.0.7",
                "podIPs": [{"ip": "10.0.0.7"}], "hostIP": "10.0.0.7",
                "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    };
    let steering = async || {
        let (_, report) = doctor::diagnose(
            &m.client,
            &Options {
                target: Target::Cluster {
                    namespace: None,
                    cluster: CLUSTER.into(),
                },
                // Nothing answers there: only the workload rows matter here.
                resolver: Resolver::Server("127.0.0.1:9".parse().unwrap()),
                ingress_address: Vec::new(),
                workload_kubeconfig: None,
                timeout: Duration::from_secs(1),
            },
        )
        .await
        .unwrap();
        report.into_iter().find(|c| c.name == "steering").unwrap()
    };
    let slices: Api<EndpointSlice> = Api::namespaced(wc.clone(), "default");
    let selected = async || {
        slices
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .unwrap()
            .items
            .iter()
            .map(|s| s.endpoints.len())
            .sum::<usize>()
    };

    // Today's service-steered cluster: the pod in kube-system, selected by nothing.
    proxy_pod("kube-system").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        selected().await,
        0,
        "a Service selects its own namespace only"
    );
    let check = steering().await;
    assert_eq!(check.verdict, Verdict::Fail, "{check:?}");
    assert!(
        check.detail.contains("hold no ready node proxy endpoint")
            && check.detail.contains("must run in default"),
        "{}",
        check.detail
    );

    // The fixed one: the pod next to the Service.
    proxy_pod("default").await;
    eventually("the proxy pod selected", || async {
        (selected().await > 0).then_some(())
    })
    .await;
    let check = steering().await;
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    assert!(
        check.detail.contains("1 ready proxy endpoint"),
        "{}",
        check.detail
    );
}
