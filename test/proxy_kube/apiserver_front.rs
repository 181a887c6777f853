//! The node proxy on loopback in front of a real kube-apiserver (realkube):
//! the set-up the tests of its paths against a real API server share. The
//! proxy serves a leaf of a CA of its own (`proxy-ca.crt` in the test's
//! folder, what clients trust) and verifies the API server against the
//! cluster's CA.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command},
    time::{Duration, Instant},
};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Wait up to a minute for `f`.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running proxy in `mode` in front of the cluster's API server; stopped
/// and its folder removed on drop.
pub struct Front {
    /// The test's folder: certificates, config, log.
    pub dir: PathBuf,
    /// The proxy's listen port on 127.0.0.1.
    pub port: u16,
    /// Its admin port.
    pub admin: u16,
    proxy: Child,
}

impl Front {
    /// Start the proxy, its serving leaf naming `leaf_names`, and wait until
    /// it is ready.
    pub fn start(cluster: &realkube::Cluster, mode: &str, tag: &str, leaf_names: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("hcp-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.as_path();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: rcgen's default would equal the leaf's, which
        // OpenSSL (curl) takes for a self-signed leaf.
        ca.distinguished_name
            .push(DnType::CommonName, "hcp-ingress test proxy CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let names = leaf_names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let leaf = CertificateParams::new(names)
            .unwrap()
            .signed_by(&leaf_key, &ca)
            .unwrap();
        std::fs::write(d.join("proxy.crt"), leaf.pem()).unwrap();
        std::fs::write(d.join("proxy.key"), leaf_key.serialize_pem()).unwrap();
        std::fs::write(d.join("api-ca.crt"), cluster.ca_pem()).unwrap();
        std::fs::write(d.join("proxy-ca.crt"), ca.pem()).unwrap();

        let api_port: u16 = cluster.url().rsplit(':').next().unwrap().parse().unwrap();
        let (port, admin) = (free_port(), free_port());
        std::fs::write(
            d.join("proxy.yaml"),
            format!(
                "listen: {{address: 127.0.0.1, port: {port}}}\nmode: {mode}\n\
                 upstream: {{serverName: localhost, port: {api_port}, addresses: [\"127.0.0.1\"], caFile: {d}/api-ca.crt}}\n\
                 tls: {{certFile: {d}/proxy.crt, keyFile: {d}/proxy.key}}\n\
                 admin: {{address: \"127.0.0.1:{admin}\"}}\nlog: {{level: debug}}\n",
                d = d.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("proxy.log")).unwrap();
        let proxy = Command::new(crate::proxy_bin::proxy_bin())
            .arg("--config")
            .arg(d.join("proxy.yaml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let front = Self {
            dir,
            port,
            admin,
            proxy,
        };
        eventually("the proxy is ready", || {
            Command::new("curl")
                .args([
                    "-sf",
                    "-m",
                    "2",
                    &format!("http://127.0.0.1:{admin}/readyz"),
                ])
                .status()
                .is_ok_and(|s| s.success())
        });
        front
    }

    /// The proxy's process id.
    pub fn pid(&self) -> u32 {
        self.proxy.id()
    }

    /// The proxy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("proxy.log")).unwrap_or_default()
    }

    /// Its `/metrics` text.
    pub fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args([
                "-s",
                "-m",
                "5",
                &format!("http://127.0.0.1:{}/metrics", self.admin),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One sample of `/metrics` (0 when absent).
    pub fn metric(&self, sample: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|r| r.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap_or(0.0))
            .unwrap_or(0.0)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
