//! The real ingress controllers as processes, where
//! `hack/consumers/build.sh` put them, and the checks every consumer test
//! makes through them.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::{
    bed::{ADMIN_GROUP, ADMIN_USER, API_HOST, Bed, CLUSTER, KONNECTIVITY_HOST, apply, repo},
    tls::{KONNECTIVITY_GREETING, Seen, look, request, strict_client},
};

/// How to build what these tests need.
pub const HOW_TO_BUILD: &str = "run `bash hack/consumers/build.sh` (builds Traefik and haproxy-ingress from the Go module proxy, versions in hack/consumers/versions.env)";

/// The folder `hack/consumers/build.sh` builds consumer `name` into.
pub fn bin_dir(name: &str) -> PathBuf {
    built_by("hack/consumers/build.sh", name)
}

/// The folder a build script of the repository (`script`, which answers
/// `--print-bin-dir <name>`) builds `name` into.
pub fn built_by(script: &str, name: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join(script))
        .args(["--print-bin-dir", name])
        .output()
        .unwrap_or_else(|e| panic!("bash runs {script}: {e}"));
    assert!(out.status.success(), "{script} --print-bin-dir {name}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The haproxy-ingress controller `hack/consumers/build.sh` builds.
pub fn haproxy_ingress_binary() -> PathBuf {
    bin_dir("haproxy-ingress").join("haproxy-ingress-controller")
}

/// The files a run of haproxy-ingress needs, for [`crate::bed::ready`]:
/// the controller, and the Lua files the image's start script copies next
/// to the config, whose `json` module comes from Debian's lua-json.
pub fn haproxy_ingress_files() -> Vec<(PathBuf, &'static str)> {
    vec![
        (haproxy_ingress_binary(), HOW_TO_BUILD),
        (
            bin_dir("haproxy-ingress").join("rootfs/etc/lua/services.lua"),
            HOW_TO_BUILD,
        ),
        (
            PathBuf::from("/usr/share/lua/5.3/json.lua"),
            "the lua-json package: apt-get install lua-json",
        ),
    ]
}

/// Start haproxy-ingress against the bed's management cluster, as the
/// controller of IngressClass `haproxy-ingress`, its output in the bed's
/// `haproxy-ingress.log`. `frontends` are the entries of its ConfigMap
/// that say where its HTTP and HTTPS frontends listen: the one thing the
/// tests place differently (the port the test calls, the addresses it
/// calls it at). Its other listeners go to loopback, on free ports.
///
/// It is not waited for: the checks that follow wait until it answers.
pub async fn start_haproxy_ingress(bed: &Bed, frontends: Value) -> Process {
    let bin = bin_dir("haproxy-ingress");
    let client = &bed.client;
    apply(
        client,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
               "metadata": {"name": "haproxy-ingress"},
               "spec": {"controller": "haproxy-ingress.github.io/controller"}}),
        "platform",
    )
    .await;
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ingress"}}),
        "platform",
    )
    .await;
    // Every listener on a free port and an address of the test's: the
    // defaults are 80, 443, 1936 and 10253 on every address.
    let mut data = json!({
        "bind-ip-addr-tcp": "127.0.0.1",
        "healthz-port": free_port().to_string(), "bind-ip-addr-healthz": "127.0.0.1",
        "stats-port": free_port().to_string(), "bind-ip-addr-stats": "127.0.0.1",
    });
    let frontends = frontends.as_object().expect("frontends: a JSON object");
    for (key, value) in frontends {
        data[key] = value.clone();
    }
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "haproxy-ingress", "namespace": "ingress"},
               "data": data}),
        "platform",
    )
    .await;

    // The Lua files where the image's start script copies them, below the
    // local filesystem prefix.
    let prefix = bed.dir.path().join("fs");
    let lua = prefix.join("etc/haproxy/lua");
    std::fs::create_dir_all(&lua).unwrap();
    for entry in std::fs::read_dir(bin.join("rootfs/etc/lua"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(entry.path(), lua.join(entry.file_name())).unwrap();
    }
    // Templates are read from `rootfs/etc/templates` relative to the
    // working directory when a local filesystem prefix is set.
    Process::spawn(
        &haproxy_ingress_binary(),
        &[
            format!("--kubeconfig={}", bed.consumer_kubeconfig().display()),
            format!("--local-filesystem-prefix={}", prefix.display()),
            "--master-worker".into(),
            "--configmap=ingress/haproxy-ingress".into(),
            "--ingress-class=haproxy-ingress".into(),
            "--healthz-port=0".into(),
            format!("--healthz-addr=127.0.0.1:{}", free_port()),
            // Status and Gateway API need POD_NAMESPACE (an in-cluster
            // run); the Ingress path is what is under test.
            "--update-status=false".into(),
            "--watch-gateway=false".into(),
            "--v=2".into(),
        ],
        &bin,
        bed.dir.path().join("haproxy-ingress.log"),
    )
}

/// A plain HTTP/1.0 GET of `path` at `addr` (a consumer's health or
/// metrics port): the status and the body, if anything answered.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A free loopback port (released again: the consumer binds it a moment later).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A consumer process, its output in `log`; it and every process it
/// started (haproxy-ingress starts haproxy in a process group of its own)
/// are killed on drop, by pid.
pub struct Process {
    child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn spawn(program: &Path, args: &[String], cwd: &Path, log: PathBuf) -> Process {
        Process::spawn_with_env(program, args, &[], cwd, log)
    }

    /// [`Process::spawn`] with `env` added to the test's environment.
    pub fn spawn_with_env(
        program: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        cwd: &Path,
        log: PathBuf,
    ) -> Process {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        Process { child, log }
    }

    /// Whether it still runs (not exited, not a zombie).
    pub fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .ok()
            .and_then(|s| Some(s.rsplit_once(") ")?.1.starts_with('Z')))
            == Some(false)
    }

    /// The last lines of its output.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// Every descendant of `pid`, children first.
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            found.push(child);
            found.extend(descendants(child));
        }
    }
    found
}

impl Drop for Process {
    fn drop(&mut self) {
        let others = descendants(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in others {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The checks a tenant's user depends on, through the ingress at `ingress`:
/// 1. SNI `apiHost` reaches the tenant's own API server, passed through: a
///    client that trusts only the tenant's CA completes the handshake, and
///    the API server authenticates the client certificate (SelfSubjectReview
///    names its user and group);
/// 2. SNI `konnectivityHost` reaches the konnectivity backend port, not the
///    API server's;
/// 3. an SNI no route names reaches neither.
pub async fn assert_passthrough(bed: &Bed, ingress: SocketAddr, consumer: &Process) {
    // Until the consumer has read the route: it watches the API server
    // and reloads on its own schedule.
    let seen = answered(ingress, API_HOST, &bed.tenant_leaf, consumer).await;
    assert!(seen.error.is_none(), "{seen:?}");

    let (status, response) = request(
        ingress,
        API_HOST,
        strict_client(bed.tenant.ca_pem(), &bed.admin),
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
    )
    .await
    .unwrap_or_else(|e| panic!("{CLUSTER}'s API server through {ingress}: {e}"));
    assert_eq!(
        status, 201,
        "SelfSubjectReview through {ingress}: {response}"
    );
    assert!(
        response.contains(&format!(r#""username":"{ADMIN_USER}""#))
            && response.contains(&format!(r#""{ADMIN_GROUP}""#)),
        "the tenant's API server did not see the client certificate of {ADMIN_USER}: {response}"
    );

    // Its own route (TLSRoutes: its own object, which may be read a moment
    // after the API server's).
    let seen = answered(ingress, KONNECTIVITY_HOST, &bed.konnectivity.leaf, consumer).await;
    assert_eq!(seen.first_bytes, KONNECTIVITY_GREETING, "{seen:?}");

    let stranger = "api.unknown-tenant.hcp.example.com";
    let seen = look(ingress, stranger).await;
    assert!(
        seen.leaf.as_ref() != Some(&bed.tenant_leaf)
            && seen.leaf.as_ref() != Some(&bed.konnectivity.leaf)
            && seen.first_bytes != KONNECTIVITY_GREETING,
        "SNI {stranger}, which no route names, reached a tenant backend: {seen:?}"
    );
}

/// Wait up to 90 s until SNI `sni` at `ingress` is answered with `leaf`.
async fn answered(ingress: SocketAddr, sni: &str, leaf: &[u8], consumer: &Process) -> Seen {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        assert!(
            consumer.running(),
            "the consumer exited; its log ends with:\n{}",
            consumer.tail()
        );
        let seen = look(ingress, sni).await;
        if seen.leaf.as_deref() == Some(leaf) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "SNI {sni} at {ingress} was not answered by its backend within 90 s (last: {seen:?}); the consumer's log ends with:\n{}",
            consumer.tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
