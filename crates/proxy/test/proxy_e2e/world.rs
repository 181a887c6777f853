//! A small world of network namespaces and real peers:
//!
//! ```text
//!  pod ns                 node ns                              lb ns
//!  client ──veth──> DNAT 10.96.0.1:443 → 240.0.0.1:443 (on lo)
//!  10.244.0.2        proxy ──veth 198.51.100.1 ──> ingress A 198.51.100.10:443 ─┐ SNI
//!                                                   ingress B 198.51.100.11:443 ─┤ routing
//!                                                   tenant A nginx 127.0.0.1:9001 <┘
//!                                                   tenant B nginx 127.0.0.1:9002
//! ```
//! Everything is torn down on drop (processes killed, namespaces deleted).

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::Value;

pub const API_A: &str = "api.tenant-a.example.com";
pub const API_B: &str = "api.tenant-b.example.com";
pub const SERVICE_IP: &str = "10.96.0.1";
pub const ADVERTISE: &str = "240.0.0.1";
pub const SERVICE_IP6: &str = "fd00:96::1";
pub const ADVERTISE6: &str = "fd00:240::1";
pub const INGRESS: [&str; 2] = ["198.51.100.10", "198.51.100.11"];
pub const INGRESS6: [&str; 2] = ["fd00:198::10", "fd00:198::11"];
pub const ADMIN: &str = "127.0.0.1:9445";

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Fail loudly when the machine lacks what these tests need: CI has it all.
pub fn require() {
    let mut missing = Vec::new();
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    if String::from_utf8_lossy(&uid).trim() != "0" {
        missing.push("root (network namespaces, iptables)".to_string());
    }
    for bin in [
        "ip",
        "iptables",
        "ip6tables",
        "haproxy",
        "nginx",
        "python3",
        "curl",
        "ss",
        "prlimit",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {bin}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            missing.push(bin.to_string());
        }
    }
    if !Path::new("/usr/lib/nginx/modules/ngx_stream_module.so").exists() {
        missing.push("libnginx-mod-stream".into());
    }
    assert!(
        missing.is_empty(),
        "proxy e2e prerequisites missing: {missing:?}; install them with \
         `apt-get install -y haproxy nginx libnginx-mod-stream iproute2 iptables python3 curl` (see .ci/run)"
    );
}

/// The proxy binary under test: this build's, or the one `HCP_E2E_PROXY_BIN`
/// names, to run the same tests against another build (a release one, an
/// older one that aborted on a panic, or another architecture's).
pub fn proxy_bin() -> String {
    std::env::var("HCP_E2E_PROXY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_hcp-ingress-proxy").to_string())
}

/// Command words in front of the proxy binary for every test:
/// `HCP_E2E_PROXY_RUNNER`, split at spaces (`qemu-aarch64-static` runs
/// an arm64 build on this host; the emulator executes the binary in its
/// own process, so the proxy's pid, signals and sockets are the test's as
/// before).
fn proxy_runner() -> Vec<String> {
    std::env::var("HCP_E2E_PROXY_RUNNER")
        .map(|words| words.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// Run a command; panic with its output on failure.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("failed to run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Test PKI: tenant CAs, tenant API server certs, proxy leaf, client cert.
pub struct Pki {
    pub dir: PathBuf,
    ca_a: CertifiedIssuer<'static, KeyPair>,
}

fn ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    cn: &str,
    sans: &[&str],
    client: bool,
) -> (String, String, Vec<u8>) {
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

impl Pki {
    fn new(dir: &Path) -> Self {
        let ca_a = ca("tenant-a cluster CA");
        let ca_b = ca("tenant-b cluster CA");
        fs::write(dir.join("ca-a.crt"), ca_a.pem()).unwrap();
        fs::write(dir.join("ca-b.crt"), ca_b.pem()).unwrap();
        // Like a real kube-apiserver, tenant A's cert also names the service
        // (its IPv6 service IP too, for the pods of the IPv6 tests).
        let (c, k, _) = leaf(
            &ca_a,
            "kube-apiserver",
            &[API_A, "kubernetes.default.svc", SERVICE_IP, SERVICE_IP6],
            false,
        );
        fs::write(dir.join("tenant-a.crt"), c).unwrap();
        fs::write(dir.join("tenant-a.key"), k).unwrap();
        let (c, k, _) = leaf(&ca_b, "kube-apiserver", &[API_B], false);
        fs::write(dir.join("tenant-b.crt"), c).unwrap();
        fs::write(dir.join("tenant-b.key"), k).unwrap();
        let (c, k, _) = leaf(&ca_a, "e2e-client", &[], true);
        fs::write(dir.join("client.crt"), c).unwrap();
        fs::write(dir.join("client.key"), k).unwrap();
        let pki = Self {
            dir: dir.to_owned(),
            ca_a,
        };
        pki.rotate_proxy_leaf();
        pki
    }

    /// Write a fresh proxy serving leaf (ECDSA P-256, cluster CA A); returns its DER.
    pub fn rotate_proxy_leaf(&self) -> Vec<u8> {
        let sans = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            SERVICE_IP,
            ADVERTISE,
            SERVICE_IP6,
            ADVERTISE6,
        ];
        let (c, k, der) = leaf(&self.ca_a, "hcp-ingress-proxy", &sans, false);
        // Write to temporary names and rename, as a Secret volume swaps.
        fs::write(self.dir.join("proxy.crt.tmp"), c).unwrap();
        fs::write(self.dir.join("proxy.key.tmp"), k).unwrap();
        fs::rename(self.dir.join("proxy.key.tmp"), self.dir.join("proxy.key")).unwrap();
        fs::rename(self.dir.join("proxy.crt.tmp"), self.dir.join("proxy.crt")).unwrap();
        der
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Write `name`.crt/.key: a server certificate for tenant A's names,
    /// signed by a CA the proxy does not trust.
    pub fn write_foreign_tenant_a(&self, name: &str) {
        let rogue = ca("not the cluster CA");
        let (c, k, _) = leaf(
            &rogue,
            "kube-apiserver",
            &[API_A, "kubernetes.default.svc", SERVICE_IP],
            false,
        );
        fs::write(self.dir.join(format!("{name}.crt")), c).unwrap();
        fs::write(self.dir.join(format!("{name}.key")), k).unwrap();
    }
}

/// Which shared ingress the world runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ingress {
    Haproxy,
    NginxStream,
    /// HAProxy that expects PROXY v2 and routes on the authority TLV.
    HaproxyProxyProtocol,
}

pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

pub struct World {
    /// Listen (advertise) address of the proxy; IPv4 unless a test says so.
    pub listen: String,
    /// Command words in front of the proxy binary (e.g. `prlimit`).
    pub proxy_wrapper: Vec<String>,
    /// YAML lines (indented two spaces) appended to the `upstream:` block.
    pub upstream_extra: String,
    pub dir: PathBuf,
    pub pki: Pki,
    pub pod: String,
    pub node: String,
    pub lb: String,
    procs: Vec<Proc>,
}

impl World {
    /// Build namespaces, PKI, tenant backends and two ingress instances.
    pub fn new(ingress: Ingress) -> Self {
        require();
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("hcp-proxy-e2e-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let pki = Pki::new(&dir);
        let mut w = World {
            listen: ADVERTISE.to_string(),
            proxy_wrapper: Vec::new(),
            upstream_extra: String::new(),
            pod: format!("hcp{id}pod"),
            node: format!("hcp{id}node"),
            lb: format!("hcp{id}lb"),
            dir,
            pki,
            procs: Vec::new(),
        };
        w.network(&id);
        w.backends();
        w.ingress(ingress);
        w
    }

    fn network(&self, id: &str) {
        for ns in [&self.pod, &self.node, &self.lb] {
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let (vp, vn, vl, vm) = (
            format!("h{id}p"),
            format!("h{id}n"),
            format!("h{id}l"),
            format!("h{id}m"),
        );
        // pod <-> node
        run(&[
            "ip", "link", "add", &vp, "netns", &self.pod, "type", "veth", "peer", "name", &vn,
            "netns", &self.node,
        ]);
        run(&[
            "ip",
            "-n",
            &self.pod,
            "addr",
            "add",
            "10.244.0.2/24",
            "dev",
            &vp,
        ]);
        run(&[
            "ip",
            "-n",
            &self.node,
            "addr",
            "add",
            "10.244.0.1/24",
            "dev",
            &vn,
        ]);
        run(&["ip", "-n", &self.pod, "link", "set", &vp, "up"]);
        run(&["ip", "-n", &self.node, "link", "set", &vn, "up"]);
        run(&[
            "ip",
            "-n",
            &self.pod,
            "route",
            "add",
            "default",
            "via",
            "10.244.0.1",
        ]);
        // node <-> lb (IPv4 and IPv6)
        run(&[
            "ip", "link", "add", &vm, "netns", &self.node, "type", "veth", "peer", "name", &vl,
            "netns", &self.lb,
        ]);
        run(&[
            "ip",
            "-n",
            &self.node,
            "addr",
            "add",
            "198.51.100.1/24",
            "dev",
            &vm,
        ]);
        run(&[
            "ip",
            "-n",
            &self.node,
            "addr",
            "add",
            "fd00:198::1/64",
            "dev",
            &vm,
            "nodad",
        ]);
        for (a4, a6) in INGRESS.iter().zip(INGRESS6) {
            run(&[
                "ip",
                "-n",
                &self.lb,
                "addr",
                "add",
                &format!("{a4}/24"),
                "dev",
                &vl,
            ]);
            run(&[
                "ip",
                "-n",
                &self.lb,
                "addr",
                "add",
                &format!("{a6}/64"),
                "dev",
                &vl,
                "nodad",
            ]);
        }
        run(&["ip", "-n", &self.node, "link", "set", &vm, "up"]);
        run(&["ip", "-n", &self.lb, "link", "set", &vl, "up"]);
        // IPv6 between pod and node too.
        run(&[
            "ip",
            "-n",
            &self.pod,
            "addr",
            "add",
            "fd00:244::2/64",
            "dev",
            &vp,
            "nodad",
        ]);
        run(&[
            "ip",
            "-n",
            &self.node,
            "addr",
            "add",
            "fd00:244::1/64",
            "dev",
            &vn,
            "nodad",
        ]);
        run(&[
            "ip",
            "-n",
            &self.pod,
            "-6",
            "route",
            "add",
            "default",
            "via",
            "fd00:244::1",
        ]);
        self.kube_proxy_dnat(
            "ip6tables",
            &format!("{SERVICE_IP6}/128"),
            &format!("[{ADVERTISE6}]:443"),
        );
        self.kube_proxy_dnat(
            "iptables",
            &format!("{SERVICE_IP}/32"),
            &format!("{ADVERTISE}:443"),
        );
    }

    /// Start a process inside a namespace; output goes to a log file.
    pub fn spawn(&mut self, ns: &str, name: &str, args: &[&str]) {
        let log = self.dir.join(format!("{name}.log"));
        let f = fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {name}: {e}"));
        self.procs.push(Proc {
            name: name.to_string(),
            child,
            log,
        });
    }

    /// Process id of a named process (`ip netns exec` execs it in place).
    pub fn pid(&self, name: &str) -> u32 {
        self.procs
            .iter()
            .find(|p| p.name == name)
            .expect("no such process")
            .child
            .id()
    }

    /// Stop a named process with a signal; returns its exit status code.
    ///
    /// The signal is sent again every second until the process is gone: a
    /// single-process nginx (the `backends`) that gets SIGTERM after
    /// installing its handlers but before its first wait for events only
    /// acts on it at its next event, which an idle stand-in never has (seen
    /// on a loaded machine: still running a minute later).
    pub fn signal(&mut self, name: &str, sig: &str) -> Option<i32> {
        let i = self
            .procs
            .iter()
            .position(|p| p.name == name)
            .expect("no such process");
        let mut p = self.procs.remove(i);
        let pid = p.child.id().to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next_send = Instant::now();
        loop {
            if Instant::now() >= next_send {
                run(&["kill", &format!("-{sig}"), &pid]);
                next_send = Instant::now() + Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(20));
            if let Some(st) = p.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not exit after SIG{sig}"
            );
        }
    }

    /// Start the tenant stand-ins (nginx, `backends`) from the current
    /// certificate files.
    pub fn backends(&mut self) {
        let body = |t: &str| {
            format!(
                r#"{{"tenant":"{t}","client":"$ssl_client_s_dn","verify":"$ssl_client_verify"}}\n"#
            )
        };
        let conf = format!(
            r#"daemon off;
master_process off;
pid {dir}/backends.pid;
error_log {dir}/backends-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/tmp; proxy_temp_path {dir}/tmp; fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp; scgi_temp_path {dir}/tmp;
  default_type application/json;
  server {{
    listen 127.0.0.1:9001 ssl http2;
    ssl_certificate {dir}/tenant-a.crt; ssl_certificate_key {dir}/tenant-a.key;
    ssl_client_certificate {dir}/ca-a.crt; ssl_verify_client optional;
    location / {{ return 200 '{a}'; }}
  }}
  server {{
    listen 127.0.0.1:9002 ssl http2;
    ssl_certificate {dir}/tenant-b.crt; ssl_certificate_key {dir}/tenant-b.key;
    location / {{ return 200 '{b}'; }}
  }}
}}
"#,
            dir = self.dir.display(),
            a = body("a"),
            b = body("b"),
        );
        fs::create_dir_all(self.dir.join("tmp")).unwrap();
        let path = self.dir.join("backends.conf");
        fs::write(&path, conf).unwrap();
        let lb = self.lb.clone();
        let p = path.display().to_string();
        let prefix = self.dir.display().to_string();
        self.spawn(&lb, "backends", &["nginx", "-p", &prefix, "-c", &p]);
    }

    /// Start one ingress instance per address in `INGRESS` (named
    /// `ingress0`, `ingress1`).
    fn ingress(&mut self, kind: Ingress) {
        for i in 0..2 {
            self.start_ingress(kind, i);
        }
    }

    pub fn start_ingress(&mut self, kind: Ingress, i: usize) {
        let (a4, a6) = (INGRESS[i], INGRESS6[i]);
        let dir = self.dir.display().to_string();
        let lb = self.lb.clone();
        match kind {
            Ingress::Haproxy | Ingress::HaproxyProxyProtocol => {
                let (bind_opt, routing) = if kind == Ingress::Haproxy {
                    (
                        "",
                        format!(
                            "  tcp-request inspect-delay 5s\n  tcp-request content accept if {{ req.ssl_hello_type 1 }}\n  \
                             use_backend tenant_a if {{ req.ssl_sni -i {API_A} }}\n  use_backend tenant_b if {{ req.ssl_sni -i {API_B} }}\n"
                        ),
                    )
                } else {
                    (
                        " accept-proxy",
                        format!(
                            "  use_backend tenant_a if {{ fc_pp_authority -i {API_A} }}\n  use_backend tenant_b if {{ fc_pp_authority -i {API_B} }}\n"
                        ),
                    )
                };
                let conf = format!(
                    "global\n  maxconn 4096\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n\
                     frontend ingress\n  bind {a4}:443{bind_opt}\n  bind [{a6}]:443{bind_opt}\n{routing}\
                     backend tenant_a\n  server a 127.0.0.1:9001\nbackend tenant_b\n  server b 127.0.0.1:9002\n"
                );
                let path = format!("{dir}/ingress{i}.cfg");
                fs::write(&path, conf).unwrap();
                self.spawn(
                    &lb,
                    &format!("ingress{i}"),
                    &["haproxy", "-db", "-f", &path],
                );
            }
            Ingress::NginxStream => {
                let conf = format!(
                    r#"load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
master_process off;
pid {dir}/ingress{i}.pid;
error_log {dir}/ingress{i}-error.log warn;
events {{ worker_connections 1024; }}
stream {{
  map $ssl_preread_server_name $tenant {{
    {API_A} 127.0.0.1:9001;
    {API_B} 127.0.0.1:9002;
    default 127.0.0.1:9;
  }}
  server {{
    listen {a4}:443;
    listen [{a6}]:443;
    ssl_preread on;
    proxy_pass $tenant;
  }}
}}
"#
                );
                let path = format!("{dir}/ingress{i}.conf");
                fs::write(&path, conf).unwrap();
                self.spawn(
                    &lb,
                    &format!("ingress{i}"),
                    &["nginx", "-p", &dir, "-c", &path],
                );
            }
        }
    }

    /// Write the proxy config (mode, extra YAML lines appended), start it and
    /// wait until it is ready.
    pub fn start_proxy(&mut self, mode: &str, upstream_addrs: &[&str], extra: &str) {
        self.launch_proxy(mode, upstream_addrs, extra);
        self.wait_ready();
    }

    /// Like `start_proxy`, without waiting for readiness.
    pub fn launch_proxy(&mut self, mode: &str, upstream_addrs: &[&str], extra: &str) {
        let addrs = upstream_addrs
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let conf = format!(
            "listen: {{address: \"{listen}\", port: 443, interface: lo}}\n\
             mode: {mode}\n\
             upstream:\n  serverName: {API_A}\n  port: 443\n  addresses: [{addrs}]\n  caFile: {ca}\n  \
             healthCheck: {{interval: 300ms, timeout: 2s}}\n{upstream_extra}\
             tls: {{certFile: {crt}, keyFile: {key}}}\n\
             {passthrough}\
             admin: {{address: \"{ADMIN}\"}}\n\
             reload: {{interval: 200ms}}\n\
             log: {{format: json, level: debug}}\n{extra}",
            listen = self.listen,
            passthrough = if extra.contains("passthroughServerNames") {
                String::new()
            } else {
                format!("passthroughServerNames: [{API_A}]\n")
            },
            upstream_extra = self.upstream_extra,
            ca = self.pki.path("ca-a.crt"),
            crt = self.pki.path("proxy.crt"),
            key = self.pki.path("proxy.key"),
        );
        fs::write(self.dir.join("proxy.yaml"), conf).unwrap();
        let cfg = self.dir.join("proxy.yaml").display().to_string();
        let node = self.node.clone();
        let mut wrapper = self.proxy_wrapper.clone();
        wrapper.extend(proxy_runner());
        let mut args: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        let bin = proxy_bin();
        args.extend([bin.as_str(), "--config", &cfg]);
        self.spawn(&node, "proxy", &args);
    }

    /// Write a file the node namespace sees as `/etc/<name>` (`ip netns
    /// exec` bind-mounts `/etc/netns/<ns>/<name>` at each start). Written in
    /// place, so a running proxy sees later changes too.
    pub fn node_etc(&self, name: &str, text: &str) {
        let dir = Path::new("/etc/netns").join(&self.node);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), text).unwrap();
    }

    /// Whether a named process still runs.
    pub fn running(&mut self, name: &str) -> bool {
        let p = self
            .procs
            .iter_mut()
            .find(|p| p.name == name)
            .expect("no such process");
        p.child.try_wait().unwrap().is_none()
    }

    /// The whole log of a named process.
    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// `n` connections from the pod at once (`client.py many`); see `Many`.
    pub fn many(&self, n: usize, extra: &[&str]) -> Many {
        let n = n.to_string();
        let mut args = vec![SERVICE_IP, "443", n.as_str()];
        args.extend_from_slice(extra);
        let mut held = self.spawn_held("many", &args);
        let opened = held.line();
        Many { held, opened }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("proxy.yaml")
    }

    /// GET on the admin endpoint from inside the node namespace.
    pub fn admin(&self, path: &str) -> (u16, String) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.node,
                "curl",
                "-s",
                "-m",
                "5",
                "-w",
                "\n%{http_code}",
            ])
            .arg(format!("http://{ADMIN}{path}"))
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = s.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// Value of one metric sample (exact name with labels), 0 when absent.
    pub fn metric(&self, sample: &str) -> f64 {
        let (_, body) = self.admin("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|r| r.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap_or(0.0))
            .unwrap_or(0.0)
    }

    /// Poll until `f` holds (generous deadline; convergence, not timing).
    pub fn eventually(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_ready(&self) {
        self.eventually("proxy /readyz = 200", || self.admin("/readyz").0 == 200);
    }

    /// kube-proxy's part: `service` DNATed to `to` in the node, for pods
    /// (PREROUTING) and host-network processes (OUTPUT).
    fn kube_proxy_dnat(&self, iptables: &str, service: &str, to: &str) {
        for chain in ["PREROUTING", "OUTPUT"] {
            run(&[
                "ip",
                "netns",
                "exec",
                &self.node,
                iptables,
                "-t",
                "nat",
                "-A",
                chain,
                "-d",
                service,
                "-p",
                "tcp",
                "--dport",
                "443",
                "-j",
                "DNAT",
                "--to-destination",
                to,
            ]);
        }
    }

    fn client_cmd(&self, cmd: &str, extra: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.pod, "python3"])
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/test/proxy_e2e/client.py"
            ))
            .arg(cmd)
            .args(extra);
        c
    }

    /// One TLS request from the pod; returns the client's JSON report.
    pub fn get(&self, extra: &[&str]) -> Value {
        let out = self.client_cmd("get", extra).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "client output: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// `get` against the service IP, no SNI, verifying against cluster CA A.
    pub fn get_service(&self) -> Value {
        let ca = self.pki.path("ca-a.crt");
        self.get(&[SERVICE_IP, "443", "--ca", &ca])
    }

    /// Raw bytes to the service IP from the pod.
    pub fn raw(&self, hex: &str) -> Value {
        let out = self
            .client_cmd("raw", &[SERVICE_IP, "443", hex])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The client in `mode`, driven line by line over its stdin and stdout.
    fn spawn_held(&self, mode: &str, args: &[&str]) -> Held {
        let mut child = self
            .client_cmd(mode, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Held {
            child,
            stdin,
            stdout,
        }
    }

    /// A connection that stays open: first response now, second on demand.
    pub fn hold(&self, extra: &[&str]) -> Held {
        let mut h = self.spawn_held("hold", extra);
        let first = h.line();
        assert_eq!(
            first["ok"],
            true,
            "held connection failed: {first}\n{}",
            self.logs()
        );
        h
    }

    /// Tail of every log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        let mut files: Vec<PathBuf> = self.procs.iter().map(|p| p.log.clone()).collect();
        files.push(self.dir.join("proxy.log"));
        files.dedup();
        for f in files {
            let text = fs::read_to_string(&f).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            s += &format!("--- {} ---\n", f.display());
            for l in tail.into_iter().rev() {
                s += l;
                s += "\n";
            }
        }
        s
    }
}

pub struct Held {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Held {
    fn line(&mut self) -> Value {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|_| panic!("bad client line {l:?}"))
    }

    /// Send the second request on the same connection.
    pub fn again(mut self) -> Value {
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        let v = self.line();
        let _ = self.child.wait();
        v
    }
}

/// Many connections held by one client process: `opened` is its first
/// report; each `cmd` sends one command line and returns the JSON answer.
pub struct Many {
    held: Held,
    /// `{"opened", "failed", "errors"}` of the connection phase.
    pub opened: Value,
}

impl Many {
    /// Send a command (`request`, `loop SECS`, `wait SECS`); its report.
    pub fn cmd(&mut self, line: &str) -> Value {
        self.send(line);
        self.reply()
    }

    /// Send a command without waiting for its report.
    pub fn send(&mut self, line: &str) {
        writeln!(self.held.stdin, "{line}").unwrap();
        self.held.stdin.flush().unwrap();
    }

    /// The report of the command sent last.
    pub fn reply(&mut self) -> Value {
        self.held.line()
    }

    /// Close every connection and wait for the client to exit.
    pub fn close(self) {
        let Held {
            mut child, stdin, ..
        } = self.held;
        drop(stdin);
        let _ = child.wait();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        for ns in [&self.pod, &self.node, &self.lb] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = fs::remove_dir_all(Path::new("/etc/netns").join(&self.node));
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
