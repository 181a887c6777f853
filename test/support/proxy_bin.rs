//! The node binary, `hcp-ingress-proxy`, for the controller package's tests
//! that run it as the DaemonSet does. It is the proxy crate's binary
//! (crates/proxy), and cargo sets `CARGO_BIN_EXE_<name>` only for a test's
//! own package, so it is built here, once per test process: `--workspace`
//! resolves features as `cargo test --workspace` does, so the build reuses
//! that run's artifacts and only links the binary, into the same folder as
//! `hcp-ingress`. `HCP_PROXY_BIN` names a binary to run instead.
//! Included with `#[path]` by each test target that runs the proxy.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// The path of the `hcp-ingress-proxy` binary, built on first use.
pub fn proxy_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(bin) = std::env::var("HCP_PROXY_BIN") {
            return bin;
        }
        // target/<profile>/hcp-ingress: the proxy goes next to it.
        let controller = Path::new(env!("CARGO_BIN_EXE_hcp-ingress"));
        let out = controller.parent().unwrap();
        let profile = match out.file_name().unwrap().to_str().unwrap() {
            "debug" => "dev",
            other => other,
        };
        let target_dir = out.parent().unwrap();
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "--workspace",
                "--bin",
                "hcp-ingress-proxy",
                "--profile",
                profile,
            ])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build for hcp-ingress-proxy");
        assert!(
            status.success(),
            "cargo build --bin hcp-ingress-proxy: {status}"
        );
        let bin: PathBuf = out.join("hcp-ingress-proxy");
        assert!(bin.exists(), "{} is missing after the build", bin.display());
        bin.display().to_string()
    })
}
