//! Hot reload of the config file and the files it names.
//!
//! Files are polled by content hash rather than watched with inotify:
//! Kubernetes updates ConfigMap and Secret volumes by swapping a symlink,
//! which content polling sees without special cases, and it costs a few
//! small reads every `reload.interval`.

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
};

use tracing::{error, info, warn};

use super::{
    config::{Config, RESTART_ONLY_KEYS},
    metrics::ResultLabel,
    state::{Shared, State},
};

/// Hash of the contents of the config file and of every file it names.
/// A missing file hashes as absent, so its return is noticed too.
pub fn fingerprint(config_path: &Path, cfg: &Config) -> u64 {
    let mut h = DefaultHasher::new();
    let mut files: Vec<&Path> = vec![config_path, &cfg.upstream.ca_file];
    if let Some(t) = &cfg.tls {
        files.push(&t.cert_file);
        files.push(&t.key_file);
    }
    for f in files {
        std::fs::read(f).ok().hash(&mut h);
    }
    h.finish()
}

/// The restart-only keys ([`RESTART_ONLY_KEYS`]) whose value differs.
fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    RESTART_ONLY_KEYS
        .into_iter()
        .filter(|key| match *key {
            "listen" => old.listen != new.listen,
            "admin" => old.admin != new.admin,
            "limits.maxConnections" => old.max_connections != new.max_connections,
            "workerThreads" => old.worker_threads != new.worker_threads,
            "log" => old.log_format != new.log_format || old.log_level != new.log_level,
            // Caught by the test below: every listed key has its comparison.
            _ => false,
        })
        .collect()
}

/// Poll for changes and swap the state in.
pub async fn run(shared: Arc<Shared>, config_path: PathBuf) {
    let mut last = fingerprint(&config_path, &shared.state.load().cfg);
    loop {
        let interval = shared.state.load().cfg.reload_interval;
        tokio::time::sleep(interval).await;
        let current = shared.state.load_full();
        let fp = fingerprint(&config_path, &current.cfg);
        if fp == last {
            continue;
        }
        let path = config_path.clone();
        let loaded = tokio::task::spawn_blocking(move || State::load(&path))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match loaded {
            Ok(new) => {
                let ignored = restart_only(&current.cfg, &new.cfg);
                if !ignored.is_empty() {
                    warn!(keys = ?ignored, "changed keys take effect after a restart; keeping the running values");
                }
                // The new config may name other files: fingerprint those.
                last = fingerprint(&config_path, &new.cfg);
                let mut cfg = new.cfg;
                cfg.listen = current.cfg.listen.clone();
                cfg.admin = current.cfg.admin;
                cfg.max_connections = current.cfg.max_connections;
                cfg.worker_threads = current.cfg.worker_threads;
                shared
                    .metrics
                    .serving_certificate(new.tls.leaf_not_after.as_ref());
                shared.state.store(Arc::new(State { cfg, tls: new.tls }));
                shared.reloaded.notify_waiters();
                shared
                    .metrics
                    .reloads
                    .get_or_create(&ResultLabel { result: "success" })
                    .inc();
                info!("reloaded config and certificates; new connections use them");
            }
            Err(e) => {
                last = fp;
                shared
                    .metrics
                    .reloads
                    .get_or_create(&ResultLabel { result: "failure" })
                    .inc();
                error!(error = %e, "rejected the new config or certificates; the previous ones stay in force");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{RESTART_ONLY_KEYS, parse, validate};

    /// Each restart-only key, changed alone, is reported, and only it.
    #[test]
    fn every_restart_only_key_is_compared() {
        let base = "upstream: {serverName: a.example.com, caFile: /ca}\nmode: passthrough\n";
        let old = validate(parse(base).unwrap()).unwrap();
        for (key, extra) in [
            ("listen", "listen: {port: 8443}"),
            ("admin", "admin: {address: \"127.0.0.1:1\"}"),
            ("limits.maxConnections", "limits: {maxConnections: 7}"),
            ("workerThreads", "workerThreads: 2"),
            ("log", "log: {level: debug}"),
        ] {
            let new = validate(parse(&format!("{base}{extra}\n")).unwrap()).unwrap();
            assert_eq!(super::restart_only(&old, &new), vec![key], "{extra}");
        }
        assert_eq!(RESTART_ONLY_KEYS.len(), 5, "a key was added: test it above");
        let hot =
            validate(parse(&format!("{base}limits: {{maxClientHelloBytes: 4096}}\n")).unwrap())
                .unwrap();
        assert!(super::restart_only(&old, &hot).is_empty());
    }
}
