//! The node's files: containerd's, the kubelet's and kube-proxy's configs,
//! their kubeconfigs with client certificates of the cluster CA, the CNI
//! config and the node's /etc/hosts.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use base64::Engine;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use serde_json::json;

use crate::{Error, Options, POD_CIDR, ProxyMode};

/// What `hack/node/build.sh` builds.
pub const BINARIES: [&str; 6] = [
    "kubelet",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "pause.oci.tar",
    "apicall.oci.tar",
];
/// Debian's runc.
pub const RUNC: &str = "/usr/sbin/runc";
/// Debian's CNI plugins (containernetworking-plugins).
pub const CNI_BIN: &str = "/usr/lib/cni";

/// Files the namespaces' init needs before anything runs.
pub struct Files {
    pub hosts: PathBuf,
}

/// Writes every file but the kubelet's config, which needs the cgroup root.
pub fn write_all(
    dir: &Path,
    opts: &Options,
    address: Ipv4Addr,
    host_address: Ipv4Addr,
) -> Result<Files, Error> {
    let at = |name: &str| dir.join(name);
    for sub in ["cni", "containerd"] {
        std::fs::create_dir_all(at(sub))
            .map_err(|e| Error::Io(at(sub).display().to_string(), e))?;
    }
    write(&at("ca.crt"), &opts.ca_pem)?;
    write(&at("containerd.toml"), &containerd(dir))?;

    let mut hosts = format!(
        "127.0.0.1 localhost\n::1 localhost\n{address} {}\n",
        opts.name
    );
    for name in &opts.host_names {
        hosts.push_str(&format!("{host_address} {name}\n"));
    }
    write(&at("hosts"), &hosts)?;

    let node_user = format!("system:node:{}", opts.name);
    let kubelet = client_certificate(opts, &node_user, Some("system:nodes"))?;
    write(
        &at("kubelet.kubeconfig"),
        &kubeconfig(opts, &node_user, &kubelet),
    )?;
    // kube-proxy's user, which the bootstrap ClusterRoleBinding
    // system:node-proxier names.
    let proxy = client_certificate(opts, "system:kube-proxy", None)?;
    write(
        &at("kube-proxy.kubeconfig"),
        &kubeconfig(opts, "system:kube-proxy", &proxy),
    )?;
    let mut kube_proxy = json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": at("kube-proxy.kubeconfig")},
        "mode": match opts.proxy_mode {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Nftables => "nftables",
        },
        "clusterCIDR": POD_CIDR,
        // The node's conntrack table is the host's: leave its limits alone.
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        // A steering change reaches the rules within a second.
        "iptables": {"syncPeriod": "1s", "minSyncPeriod": "0s"},
        "nftables": {"syncPeriod": "1s", "minSyncPeriod": "0s"},
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    });
    // Before 1.31 the nftables mode is alpha, off unless its gate is on;
    // once GA the gate is gone and naming it is an error.
    if opts.proxy_mode == ProxyMode::Nftables && nftables_gated(&opts.kube_bin.join("kube-proxy")) {
        kube_proxy["featureGates"] = json!({"NFTablesProxyMode": true});
    }
    write(&at("kube-proxy.yaml"), &kube_proxy.to_string())?;
    Ok(Files { hosts: at("hosts") })
}

/// Whether this kube-proxy still has the `NFTablesProxyMode` gate off by
/// default (its alpha, Kubernetes 1.29 and 1.30), as its help says: its
/// nftables mode needs the gate on, and once GA naming the gate is an error.
pub fn nftables_gated(kube_proxy: &Path) -> bool {
    std::process::Command::new(kube_proxy)
        .arg("--help")
        .output()
        .is_ok_and(|help| {
            [help.stdout, help.stderr].iter().any(|out| {
                String::from_utf8_lossy(out).contains("NFTablesProxyMode=true|false (ALPHA")
            })
        })
}

/// The kubelet's config: cgroupfs under `cgroup_root`, cgroup v1 allowed,
/// containerd's socket, x509 client authentication, and eviction thresholds
/// a shared test machine does not cross.
pub fn write_kubelet_config(dir: &Path, address: Ipv4Addr, cgroup_root: &str) -> Result<(), Error> {
    let config = json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": format!("unix://{}", dir.join("containerd/containerd.sock").display()),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        // This machine's cgroups are v1 (hybrid): allowed, with a warning.
        "failCgroupV1": false,
        "failSwapOn": false,
        "address": address.to_string(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": false}, "webhook": {"enabled": false},
                           "x509": {"clientCAFile": dir.join("ca.crt")}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        // Pods see a changed ConfigMap or Secret within seconds.
        "syncFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": false,
    });
    write(&dir.join("kubelet.yaml"), &config.to_string())
}

/// containerd's config: its socket in the node's folder, its images and
/// state on the node's tmpfs, runc with cgroupfs, CNI from Debian's plugins
/// and the node's `cni` folder.
///
/// The images live on the tmpfs (`/var/lib/containerd` inside the node's
/// mount namespace) because the kubelet evicts pods when the filesystem
/// that holds them runs short: on the host's disk that depends on what
/// else the machine keeps there, and a CI machine with little disk left
/// evicted the test's pods.
fn containerd(dir: &Path) -> String {
    let d = dir.join("containerd").display().to_string();
    let cni = dir.join("cni").display().to_string();
    format!(
        "version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
[grpc]
  address = '{d}/containerd.sock'
[ttrpc]
  address = '{d}/containerd.sock.ttrpc'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
[plugins.'io.containerd.cri.v1.runtime']
  # Without CAP_SYS_RESOURCE (as here), a pod's oom_score_adj below the
  # runtime's own cannot be set; clamp it instead of failing the pod.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = '{RUNC}'
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{CNI_BIN}']
    conf_dir = '{cni}'
"
    )
}

/// A bridge with host-local addresses from [`POD_CIDR`], masquerading what
/// leaves the node, and port mappings.
pub fn cni_conflist() -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": "realnode",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

struct Credentials {
    cert_pem: String,
    key_pem: String,
}

fn client_certificate(
    opts: &Options,
    user: &str,
    group: Option<&str>,
) -> Result<Credentials, Error> {
    let ca_key = KeyPair::from_pem(&opts.ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&opts.ca_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, user);
    if let Some(group) = group {
        params
            .distinguished_name
            .push(DnType::OrganizationName, group);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Credentials {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn kubeconfig(opts: &Options, user: &str, credentials: &Credentials) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {"server": opts.api_server,
                      "certificate-authority-data": b64(&opts.ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(&credentials.cert_pem),
                   "client-key-data": b64(&credentials.key_pem)}}],
        "contexts": [{"name": "node", "context": {"cluster": "cluster", "user": user}}],
        "current-context": "node",
    })
    .to_string()
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::Io(path.display().to_string(), e))
}
