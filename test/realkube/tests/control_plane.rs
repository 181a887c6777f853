//! What the controller tests rely on from a real control plane: RBAC is
//! enforced for ServiceAccount tokens, and the audit log names who was refused.

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::{Api, api::PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_without_a_binding_is_refused_and_the_audit_log_says_who() {
    let cluster = realkube::Cluster::start(realkube::Options::default())
        .await
        .unwrap();
    let admin = cluster.admin_client();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let account =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "nobody"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let token = cluster.service_account_token("default", "nobody").await;
    let nobody = cluster.client_with_token(&token).await;

    let refused = Api::<ConfigMap>::namespaced(nobody, "default")
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref e) if e.code == 403),
        "{refused}"
    );
    // The admin may.
    Api::<ConfigMap>::namespaced(admin, "default")
        .list(&Default::default())
        .await
        .unwrap();

    let user = "system:serviceaccount:default:nobody";
    let requests = cluster.requests_by(user);
    assert!(
        requests.iter().any(|r| r.verb == "list"
            && r.status == 403
            && r.path == "/api/v1/namespaces/default/configmaps"),
        "{requests:#?}"
    );
}
