//! The config the controller renders is the config the proxy runs with:
//! every rendered ConfigMap passes the proxy's own parser and validator, and
//! the real binary (`hcp-ingress proxy --check-config`) loads it together
//! with the rendered CA, certificate and key, laid out as the kubelet mounts
//! the ConfigMap and Secret.

use hcp_ingress::{
    proxy::config,
    render::workload::{CONFIG_DIR, CONFIG_FILE, TLS_DIR},
};

use crate::{inputs, mount_proxy_files, object, render, under};

#[test]
fn every_rendered_config_passes_the_proxy_validator() {
    for input in inputs() {
        let rendered = render(&input, false);
        let text = object(&rendered, "ConfigMap", "hcp-ingress-proxy")["data"][CONFIG_FILE]
            .as_str()
            .unwrap()
            .to_string();
        let cfg = config::validate(config::parse(&text).unwrap()).unwrap_or_else(|e| {
            panic!(
                "{}: the proxy rejects its config: {e}\n{text}",
                input.display()
            )
        });
        assert_eq!(
            cfg.upstream.ca_file.to_str().unwrap(),
            format!("{CONFIG_DIR}/ca.crt")
        );
        if let Some(tls) = &cfg.tls {
            assert_eq!(
                tls.cert_file.to_str().unwrap(),
                format!("{TLS_DIR}/tls.crt")
            );
            assert_eq!(tls.key_file.to_str().unwrap(), format!("{TLS_DIR}/tls.key"));
        }
    }
}

#[test]
fn the_proxy_binary_loads_the_rendered_config_and_certificates() {
    for input in inputs() {
        let rendered = render(&input, false);
        let dir = std::env::temp_dir().join(format!(
            "hcp-ingress-workload-{}-{}",
            std::process::id(),
            input.file_stem().unwrap().to_str().unwrap()
        ));
        mount_proxy_files(&rendered, &dir, &[]);
        let output = std::process::Command::new(crate::proxy_bin::proxy_bin())
            .arg("--check-config")
            .arg(under(&dir, CONFIG_DIR).join(CONFIG_FILE))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{}: the proxy refuses what was rendered: {stderr}",
            input.display()
        );
        // The printed effective config is itself a config the proxy takes.
        let effective = String::from_utf8(output.stdout).unwrap();
        let printed = config::validate(config::parse(&effective).unwrap()).unwrap();
        assert!(
            printed.upstream.server_name.starts_with("api.tenant-0"),
            "{effective}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
