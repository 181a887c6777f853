//! The HTTP front: routing of Kubernetes REST paths to store operations,
//! query parameters, content negotiation (JSON, YAML bodies, Tables), the
//! request log and fault hooks.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch as signal;

use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::faults::{Hooks, RequestRecord};
use crate::registry::ResourceSpec;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, PatchBody, Store, WriteOptions};
use crate::watch::{self, WatchRequest};

/// Response body: a full buffer or a watch stream.
pub type Body = BoxBody<Bytes, Infallible>;

/// State shared by all connections of one server.
pub struct Shared {
    /// Objects.
    pub store: Arc<Store>,
    /// Request log and faults.
    pub hooks: Arc<Hooks>,
    /// Base URL, for `/api`'s server address.
    pub url: String,
    /// How often watches with `allowWatchBookmarks` get a bookmark.
    pub bookmark_interval: Duration,
}

/// Who answers a connection's requests.
#[derive(Clone)]
pub enum Router {
    /// One API server.
    One(Arc<Shared>),
    /// Many API servers behind one listener, told apart by the first two
    /// path segments: `/clusters/<name>/api/v1/...` is `/api/v1/...` of
    /// tenant `<name>`. A kubeconfig whose server URL ends in
    /// `/clusters/<name>` reaches it; kube clients keep the URL's path as a
    /// prefix of every request, as they do behind Rancher's proxy.
    Tenants(Arc<Tenants>),
}

/// The tenants of a [`Router::Tenants`], by name.
pub type Tenants = std::sync::RwLock<std::collections::HashMap<String, Arc<Shared>>>;

/// The first path segment of a tenant's URL.
pub const TENANT_PREFIX: &str = "clusters";

impl Router {
    /// The server for `req`, and the request as that server sees it (the
    /// tenant's prefix taken off); not found for an unknown tenant.
    fn route(&self, req: Request<Incoming>) -> Result<(Arc<Shared>, Request<Incoming>), ApiError> {
        let tenants = match self {
            Router::One(shared) => return Ok((shared.clone(), req)),
            Router::Tenants(tenants) => tenants,
        };
        let path = req.uri().path();
        let mut parts = path.trim_start_matches('/').splitn(3, '/');
        let (Some(TENANT_PREFIX), Some(name)) = (parts.next(), parts.next()) else {
            return Err(ApiError::not_found("", "tenants", path));
        };
        let rest = format!("/{}", parts.next().unwrap_or_default());
        let Some(shared) = tenants.read().expect("tenants").get(name).cloned() else {
            return Err(ApiError::not_found("", "tenants", name));
        };
        let (mut head, body) = req.into_parts();
        let path_and_query = match head.uri.query() {
            Some(q) => format!("{rest}?{q}"),
            None => rest,
        };
        head.uri = path_and_query
            .parse()
            .map_err(|_| ApiError::new(400, "BadRequest", "bad request path"))?;
        Ok((shared, Request::from_parts(head, body)))
    }
}

/// Accepts connections (over TLS when `tls` is given) until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut shutdown: signal::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("failed to accept a connection: {e}");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let mut stop = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let conn = async move {
                match tls {
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(s) => serve_io(s, router).await,
                        Err(e) => tracing::debug!("TLS handshake failed: {e}"),
                    },
                    None => serve_io(stream, router).await,
                }
            };
            tokio::select! {
                _ = conn => {}
                _ = stop.changed() => {}
            }
        });
    }
}

async fn serve_io<I>(io: I, router: Router)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let routed = router.route(req);
        async move {
            Ok::<_, Infallible>(match routed {
                Ok((shared, req)) => handle(shared, req).await,
                Err(error) => error_response(&error),
            })
        }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await
    {
        tracing::debug!("connection ended: {e}");
    }
}

/// Parsed query parameters.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Self(
            q.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        )
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

/// What a resource URL addresses.
struct Target {
    spec: ResourceSpec,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn full(code: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        content_type.parse().expect("static content type"),
    );
    r
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    full(
        code,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status())
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query_str = req.uri().query().unwrap_or_default().to_string();
    let query = Query::parse(req.uri().query());
    let header = |h: &str| {
        req.headers()
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let user_agent = header("user-agent");
    let content_type = header("content-type");
    let accept = header("accept");
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let target = resolve(&shared.store, &segments);
    let verb = verb_of(
        &method,
        &query,
        &content_type,
        target.as_ref().ok().and_then(Option::as_ref),
    );

    let fate = shared.hooks.random_fate(&verb, &path);
    let delay = shared.hooks.latency(&verb, &path) + fate.delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let record = |status: u16| RequestRecord {
        verb: verb.clone(),
        method: method.to_string(),
        path: path.clone(),
        query: query_str.clone(),
        field_manager: query.get("fieldManager").map(String::from),
        user_agent: user_agent.clone(),
        status,
        at: Some(std::time::Instant::now()),
    };
    if let Some(code) = shared.hooks.take_failure(&verb, &path).or(fate.fail) {
        shared.hooks.record(record(code));
        return error_response(&injected(code));
    }

    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return error_response(&ApiError::bad_request(format!(
                "failed to read the request body: {e}"
            )));
        }
    };
    let table = accept.contains("as=Table");
    let metadata_only = accept.contains("as=PartialObjectMetadata");
    let resp = match target {
        Err(e) => error_response(&e),
        Ok(None) => non_resource(&shared, &method, &segments),
        Ok(Some(t)) => {
            let ctx = Ctx {
                shared: &shared,
                query: &query,
                content_type: &content_type,
                user_agent: &user_agent,
                table,
                metadata_only,
            };
            match resource(&ctx, &verb, t, &body) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
    };
    // A lost reply: the write happened, the client hears an error.
    if let Some(code) = fate.lose_reply.filter(|_| resp.status().is_success()) {
        shared.hooks.record(record(code));
        return error_response(&injected(code));
    }
    shared.hooks.record(record(resp.status().as_u16()));
    resp
}

fn injected(code: u16) -> ApiError {
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    ApiError::new(code, reason, format!("injected fault: {code} {reason}"))
}

fn verb_of(method: &Method, query: &Query, content_type: &str, target: Option<&Target>) -> String {
    let Some(t) = target else {
        return "discovery".into();
    };
    let named = t.name.is_some();
    match *method {
        Method::GET if named => "get",
        Method::GET if query.flag("watch") => "watch",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH if content_type.starts_with("application/apply-patch") => "apply",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
    .into()
}

/// Maps `/api/v1/...` and `/apis/{g}/{v}/...` to a resource; `Ok(None)` for
/// discovery and other non-resource paths.
fn resolve(store: &Store, seg: &[String]) -> ApiResult<Option<Target>> {
    let (group, version, rest) = match seg {
        [a, v, rest @ ..] if a == "api" && !rest.is_empty() => ("", v.as_str(), rest),
        [a, g, v, rest @ ..] if a == "apis" && !rest.is_empty() => (g.as_str(), v.as_str(), rest),
        _ => return Ok(None),
    };
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let lookup = |plural: &str| store.resolve(group, version, plural);
    // `/namespaces/{ns}/{resource}/...` unless `{resource}` is a namespace subresource.
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(spec) = lookup(&rest[2]).filter(ResourceSpec::namespaced)
    {
        return Ok(Some(Target {
            spec,
            namespace: Some(rest[1].clone()),
            name: rest.get(3).cloned(),
            subresource: rest.get(4).cloned(),
        }));
    }
    let spec = lookup(&rest[0]).ok_or_else(not_found)?;
    if rest.len() > 3 || (spec.namespaced() && rest.len() > 1) {
        return Err(not_found());
    }
    let sub = rest.get(2).cloned();
    if let Some(s) = &sub
        && !spec.subresources.contains(s)
        && !(spec.plural == "namespaces" && s == "finalize")
    {
        return Err(not_found());
    }
    Ok(Some(Target {
        spec,
        namespace: None,
        name: rest.get(1).cloned(),
        subresource: sub,
    }))
}

fn non_resource(shared: &Shared, method: &Method, seg: &[String]) -> Response<Body> {
    if *method != Method::GET {
        return error_response(&ApiError::method_not_allowed());
    }
    let resources = shared.store.resources();
    let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
    let doc = match seg.as_slice() {
        [] => Some(
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
        ),
        ["healthz" | "livez" | "readyz", ..] => return full(200, "text/plain", "ok"),
        ["version"] => Some(discovery::version()),
        ["api"] => Some(discovery::core_versions(
            shared
                .url
                .trim_start_matches("http://")
                .trim_start_matches("https://"),
        )),
        ["apis"] => Some(discovery::group_list(&resources)),
        ["api", v] => discovery::resource_list(&resources, "", v),
        ["apis", g] => discovery::group(&resources, g),
        ["apis", g, v] => discovery::resource_list(&resources, g, v),
        ["openapi", "v3"] => Some(discovery::openapi_root(&resources)),
        ["openapi", "v3", "api", v] => discovery::openapi_group_version(&resources, "", v),
        ["openapi", "v3", "apis", g, v] => discovery::openapi_group_version(&resources, g, v),
        _ => None,
    };
    match doc {
        Some(d) => json_response(200, &d),
        None => error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

struct Ctx<'a> {
    shared: &'a Arc<Shared>,
    query: &'a Query,
    content_type: &'a str,
    user_agent: &'a str,
    table: bool,
    /// `Accept: ...;as=PartialObjectMetadata[List]`: answer metadata only.
    metadata_only: bool,
}

impl Ctx<'_> {
    fn write_options(&self, sub: Option<&str>) -> ApiResult<WriteOptions> {
        let manager = match self.query.get("fieldManager") {
            Some(m) => m.to_string(),
            // The API server names unnamed managers after the user agent's product.
            None => self
                .user_agent
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        let strict = match self.query.get("fieldValidation") {
            None | Some("" | "Ignore" | "Warn") => false,
            Some("Strict") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", got {other:?}"
                )));
            }
        };
        Ok(WriteOptions {
            manager,
            dry_run: self.query.get("dryRun") == Some("All"),
            force: self.query.flag("force"),
            strict,
            subresource: sub.map(String::from),
        })
    }

    fn parse_body(&self, body: &[u8]) -> ApiResult<Value> {
        if body.is_empty() {
            return Err(ApiError::bad_request("the request body is empty"));
        }
        // kubectl sends protobuf for built-in kinds first and falls back to JSON on 415.
        if self.content_type.contains("protobuf") || self.content_type.contains("cbor") {
            return Err(ApiError::unsupported_media_type(self.content_type));
        }
        if self.content_type.contains("yaml") {
            return serde_saphyr::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("failed to decode the YAML body: {e}"))
            });
        }
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("failed to decode the JSON body: {e}")))
    }

    /// Renders one object at the requested version (or as a Table).
    fn object(&self, code: u16, spec: &ResourceSpec, obj: Value) -> Response<Body> {
        let obj = at_version(spec, obj);
        if self.table {
            return json_response(code, &discovery::table(spec, &[&obj], None, None, true));
        }
        if self.metadata_only {
            return json_response(code, &partial_metadata(&obj));
        }
        json_response(code, &obj)
    }
}

/// The `meta.k8s.io/v1` PartialObjectMetadata form of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

fn at_version(spec: &ResourceSpec, mut obj: Value) -> Value {
    let av = spec.api_version();
    if obj.get("apiVersion").and_then(Value::as_str) != Some(av.as_str()) && obj.is_object() {
        obj["apiVersion"] = json!(av);
    }
    obj
}

fn resource(ctx: &Ctx, verb: &str, t: Target, body: &[u8]) -> ApiResult<Response<Body>> {
    let store = &ctx.shared.store;
    let spec = &t.spec;
    let ns = t.namespace.as_deref().unwrap_or_default();
    if spec.namespaced() && t.name.is_some() && t.namespace.is_none() {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    let labels = LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or_default())?;
    let fields = FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or_default())?;
    let sub = t.subresource.as_deref().filter(|s| *s != "finalize");
    match (verb, t.name.as_deref()) {
        ("get", Some(name)) => Ok(ctx.object(200, spec, (*store.get(spec, ns, name)?).clone())),
        ("list", None) => list(ctx, spec, t.namespace.as_deref(), &labels, &fields),
        ("watch", None) => watch_response(ctx, &t, labels, fields),
        ("create", None) => {
            let obj = ctx.parse_body(body)?;
            let out = store.create(spec, ns, obj, &ctx.write_options(None)?)?;
            Ok(ctx.object(201, spec, out))
        }
        ("update", Some(name)) => {
            let obj = ctx.parse_body(body)?;
            let out = store.update(spec, ns, name, obj, &ctx.write_options(sub)?)?;
            Ok(ctx.object(200, spec, out))
        }
        ("patch" | "apply", Some(name)) => {
            let v = ctx.parse_body(body)?;
            let ct = ctx
                .content_type
                .split(';')
                .next()
                .unwrap_or_default()
                .trim();
            let patch = match ct {
                "application/merge-patch+json" => PatchBody::Merge(v),
                "application/strategic-merge-patch+json" => PatchBody::Strategic(v),
                "application/json-patch+json" => PatchBody::Json(v),
                "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                    PatchBody::Apply(v)
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let existed = store.get(spec, ns, name).is_ok();
            let out = store.patch(spec, ns, name, patch, &ctx.write_options(sub)?)?;
            Ok(ctx.object(if existed { 200 } else { 201 }, spec, out))
        }
        ("delete", Some(name)) => {
            let opts = delete_options(ctx.query, body)?;
            let out = store.delete(spec, ns, name, &opts)?;
            // 202 while finalizers hold the object, as the API server answers.
            let pending = store.get(spec, ns, name).is_ok() && !opts.dry_run;
            Ok(ctx.object(if pending { 202 } else { 200 }, spec, out))
        }
        ("deletecollection", None) => {
            let opts = delete_options(ctx.query, body)?;
            let items =
                store.delete_collection(spec, t.namespace.as_deref(), &labels, &fields, &opts)?;
            let items: Vec<Value> = items.into_iter().map(|o| at_version(spec, o)).collect();
            let list = json!({"kind": format!("{}List", spec.kind), "apiVersion": spec.api_version(), "metadata": {}, "items": items});
            Ok(json_response(200, &list))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn delete_options(query: &Query, body: &[u8]) -> ApiResult<DeleteOptions> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("failed to decode DeleteOptions: {e}")))?
    };
    let s = |p: &str| b.pointer(p).and_then(Value::as_str).map(String::from);
    let dry = b
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"));
    Ok(DeleteOptions {
        propagation: query
            .get("propagationPolicy")
            .map(String::from)
            .or_else(|| s("/propagationPolicy")),
        rv: s("/preconditions/resourceVersion"),
        uid: s("/preconditions/uid"),
        dry_run: dry || query.get("dryRun") == Some("All"),
    })
}

fn list(
    ctx: &Ctx,
    spec: &ResourceSpec,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> ApiResult<Response<Body>> {
    let limit = match ctx.query.get("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    let page = ctx.shared.store.list(
        spec,
        ns,
        labels,
        fields,
        limit,
        ctx.query.get("continue").filter(|c| !c.is_empty()),
    )?;
    if ctx.table {
        let objs: Vec<&Value> = page.items.iter().map(|o| o.as_ref()).collect();
        return Ok(json_response(
            200,
            &discovery::table(
                spec,
                &objs,
                Some(page.rv),
                page.continue_token.as_deref(),
                true,
            ),
        ));
    }
    if ctx.metadata_only {
        let items: Vec<Value> = page.items.iter().map(|o| partial_metadata(o)).collect();
        let mut meta = json!({"resourceVersion": page.rv.to_string()});
        if let Some(c) = &page.continue_token {
            meta["continue"] = json!(c);
        }
        return Ok(json_response(
            200,
            &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items}),
        ));
    }
    // Written by hand so the stored objects are serialised without copying them.
    let av = spec.api_version();
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
        meta["remainingItemCount"] = json!(page.remaining.unwrap_or(0));
    }
    let mut out = Vec::with_capacity(256 + page.items.len() * 512);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{av}\",\"metadata\":{meta},\"items\":[",
            spec.kind
        )
        .as_bytes(),
    );
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let ok = if spec.crd.is_none() {
            // A real API server lists built-in kinds without each item's
            // apiVersion and kind (custom resources keep theirs): a client
            // cache filled by a list must not depend on them.
            let mut item = (**item).clone();
            if let Some(map) = item.as_object_mut() {
                map.remove("apiVersion");
                map.remove("kind");
            }
            serde_json::to_writer(&mut out, &item)
        } else if item.get("apiVersion").and_then(Value::as_str) == Some(av.as_str()) {
            serde_json::to_writer(&mut out, item.as_ref())
        } else {
            serde_json::to_writer(&mut out, &at_version(spec, (**item).clone()))
        };
        ok.map_err(|e| ApiError::internal(format!("failed to encode an object: {e}")))?;
    }
    out.extend_from_slice(b"]}");
    Ok(full(200, "application/json", out))
}

fn watch_response(
    ctx: &Ctx,
    t: &Target,
    labels: LabelSelector,
    fields: FieldSelector,
) -> ApiResult<Response<Body>> {
    let q = ctx.query;
    let from = match q.get("resourceVersion") {
        None | Some("" | "0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let initial_events_end = q.flag("sendInitialEvents");
    let req = WatchRequest {
        spec: t.spec.clone(),
        namespace: t.namespace.clone(),
        labels,
        fields,
        bookmarks: q.flag("allowWatchBookmarks"),
        initial_events_end,
        timeout: q
            .get("timeoutSeconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs),
        table: ctx.table,
        metadata_only: ctx.metadata_only,
        bookmark_interval: ctx.shared.bookmark_interval,
    };
    // sendInitialEvents replays the current state even with a resourceVersion.
    let from = if initial_events_end { None } else { from };
    let sub = ctx
        .shared
        .store
        .subscribe(&t.spec, from, t.namespace.as_deref());
    let mut rx = watch::start(
        ctx.shared.store.clone(),
        req,
        sub,
        ctx.shared.hooks.watch_drops(),
    );
    let stream = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|o| o.map(|b| Ok::<_, Infallible>(Frame::data(b))))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "application/json".parse().expect("static content type"),
    );
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        "no-cache, private".parse().expect("static header"),
    );
    Ok(r)
}
