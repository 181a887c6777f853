//! A kubeconfig pointing at a server, for clients in this process, other
//! processes (kubectl) or another instance (a `<cluster>-kubeconfig` Secret).

/// Renders a kubeconfig for `url` with one cluster, user and context named
/// `name`; `ca_pem` is the CA to trust for an HTTPS server.
pub fn render(name: &str, url: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {url}{ca}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
    namespace: default
current-context: {name}
preferences: {{}}
users:
- name: {name}
  user:
    token: memkube
"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn kubeconfig_is_valid_yaml_with_the_server_url() {
        let y = super::render("mgmt", "http://127.0.0.1:1234", None);
        let v: serde_json::Value = serde_saphyr::from_str(&y).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(v["current-context"], "mgmt");
        let y = super::render("mgmt", "https://127.0.0.1:1234", Some("PEM"));
        let v: serde_json::Value = serde_saphyr::from_str(&y).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
    }
}
