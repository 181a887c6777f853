//! Errors: [`Error`] for the Rust API of the crate, [`ApiError`] for what the
//! HTTP API answers (a `metav1.Status`, as the API server sends it).

use serde_json::{Value, json};

/// Failures of the crate's own API (starting, loading files, registering).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener could not be bound.
    #[error("failed to bind {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A file or folder could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// Path that failed.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A YAML or JSON document could not be parsed.
    #[error("failed to parse {path}: {message}")]
    Parse {
        /// Path (or description) of the document.
        path: String,
        /// Parser message.
        message: String,
    },
    /// The server refused an object (for example an invalid CRD).
    #[error("failed to create {what}: {source}")]
    Api {
        /// Object that was refused.
        what: String,
        /// Answer of the server.
        source: ApiError,
    },
    /// TLS material could not be generated.
    #[error("failed to set up TLS: {0}")]
    Tls(String),
    /// The kube client could not be built.
    #[error("failed to build a kube client: {0}")]
    Client(String),
}

/// A failed API request, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, for example `NotFound` or `Conflict`.
    pub reason: &'static str,
    /// Human readable message, worded like the API server's.
    pub message: String,
    /// `Status.details`, when there is any.
    pub details: Option<Value>,
}

/// Short alias used by the request handlers.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with a code, reason and message and no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 404, `<resource> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// 409 Conflict for a stale resourceVersion (optimistic concurrency).
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 Gone (expired resourceVersion or continue token).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 Invalid with one cause per field.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<(String, String)>) -> Self {
        let summary: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let message = if summary.len() == 1 {
            format!("{kind} \"{name}\" is invalid: {}", summary[0])
        } else {
            format!("{kind} \"{name}\" is invalid: [{}]", summary.join(", "))
        };
        let causes: Vec<Value> = causes
            .into_iter()
            .map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field}))
            .collect();
        Self {
            code: 422,
            reason: "Invalid",
            message,
            details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {content_type}"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// Adds `details` naming the object.
    pub fn with_details(mut self, group: &str, resource: &str, name: &str) -> Self {
        let mut d = json!({"name": name, "kind": resource});
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        self.details = Some(d);
        self
    }

    /// The `Status` object sent in the response body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// `configmaps` or `deployments.apps`, as in the API server's messages.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}
