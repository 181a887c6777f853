//! The API server's audit log as request records: who asked what, and what
//! the server answered. Tests read it to count writes and to check that no
//! request of the controller was rejected.

use std::path::Path;

use serde::Deserialize;

/// One finished request.
pub const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
";

/// One request the API server finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Kubernetes verb (get, list, watch, create, update, patch, delete,
    /// deletecollection), `discovery` for non-resource requests.
    pub verb: String,
    /// Request URI, path and query.
    pub uri: String,
    /// URL path.
    pub path: String,
    /// Authenticated user name.
    pub user: String,
    /// `User-Agent`.
    pub user_agent: String,
    /// Response status code.
    pub status: u16,
    /// The rejection message of a failed request, when the server gave one.
    pub message: String,
    /// Resource, subresource (`status`, `finalizers`...), namespace and name, when a resource was asked for.
    pub resource: Option<ObjectRef>,
}

/// The object a request was about.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Plural resource name.
    #[serde(default)]
    pub resource: String,
    /// Subresource.
    #[serde(default)]
    pub subresource: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// API group ("" for core).
    #[serde(default)]
    pub api_group: String,
}

impl AuditRecord {
    /// Whether the request asked to change something.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    verb: String,
    #[serde(default)]
    request_u_r_i: String,
    user: User,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    response_status: Option<Status>,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

/// Every complete line of the audit log (a line still being written is skipped).
pub fn read(path: &Path) -> Vec<AuditRecord> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
        .map(|e| {
            let path = e
                .request_u_r_i
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string();
            let status = e.response_status.unwrap_or(Status {
                code: 0,
                message: String::new(),
            });
            AuditRecord {
                verb: if e.object_ref.is_none() {
                    "discovery".into()
                } else {
                    e.verb
                },
                uri: e.request_u_r_i,
                path,
                user: e.user.username,
                user_agent: e.user_agent,
                status: status.code,
                message: status.message,
                resource: e.object_ref,
            }
        })
        .collect()
}
