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
    config::Config,
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

/// Settings that only take effect at start-up.
fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    if old.listen != new.listen {
        v.push("listen");
    }
    if old.admin != new.admin {
        v.push("admin");
    }
    if old.max_connections != new.max_connections {
        v.push("limits.maxConnections");
    }
    if old.worker_threads != new.worker_threads {
        v.push("workerThreads");
    }
    if old.log_format != new.log_format || old.log_level != new.log_level {
        v.push("log");
    }
    v
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
