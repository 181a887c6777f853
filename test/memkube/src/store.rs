//! The object store: collections per group resource, one global
//! resourceVersion counter (as etcd's revision), the write path with the API
//! server's object semantics, and the event history that watches read.
//!
//! Everything sits behind one mutex: writes are serialised, and a watch that
//! subscribes while holding it can never miss or repeat an event.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::apply::{self, Writer};
use crate::crd;
use crate::error::{ApiError, ApiResult};
use crate::registry::{ResourceSpec, Scope, builtins};
use crate::selector::{FieldSelector, LabelSelector};
use crate::typeinfo::TypeInfo;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object, kept in the history ring.
#[derive(Debug)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (before it, for deletions).
    pub object: Arc<Value>,
    /// The object before the change, to turn selector transitions into ADDED/DELETED.
    pub previous: Option<Arc<Value>>,
}

type Key = (String, String);

/// All objects of one group resource and their recent history.
struct Collection {
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Arc<Event>>,
    /// Highest resourceVersion dropped from the history ring.
    evicted: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

impl Collection {
    fn new(watch_buffer: usize) -> Self {
        Self {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            evicted: 0,
            tx: broadcast::channel(watch_buffer).0,
        }
    }
}

/// How a write was asked for.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `fieldManager`, or the one derived from the user agent.
    pub manager: String,
    /// `dryRun=All`: compute the result, store nothing.
    pub dry_run: bool,
    /// `force` for apply.
    pub force: bool,
    /// `fieldValidation=Strict`.
    pub strict: bool,
    /// `status` when writing the status subresource.
    pub subresource: Option<String>,
}

/// A patch body and its format.
#[derive(Debug, Clone)]
pub enum PatchBody {
    /// `application/merge-patch+json`.
    Merge(Value),
    /// `application/strategic-merge-patch+json`.
    Strategic(Value),
    /// `application/json-patch+json`.
    Json(Value),
    /// `application/apply-patch+yaml` (server-side apply).
    Apply(Value),
}

/// Deletion options (`propagationPolicy`, preconditions).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
    /// `preconditions.resourceVersion`.
    pub rv: Option<String>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// A list page.
#[derive(Debug)]
pub struct ListPage {
    /// Matching objects.
    pub items: Vec<Arc<Value>>,
    /// resourceVersion of the list.
    pub rv: u64,
    /// Token for the next page.
    pub continue_token: Option<String>,
    /// Matching objects after this page.
    pub remaining: Option<usize>,
}

/// What a new watch starts with.
pub struct Subscription {
    /// Events to send first (history replay or synthetic ADDED).
    pub initial: Vec<Arc<Event>>,
    /// Live events.
    pub rx: broadcast::Receiver<Arc<Event>>,
    /// resourceVersion the watch starts from.
    pub rv: u64,
}

struct State {
    rv: u64,
    resources: Vec<ResourceSpec>,
    collections: HashMap<(String, String), Collection>,
    /// uid -> (group resource, key), for owner references.
    uids: HashMap<String, ((String, String), Key)>,
    /// The broadcast capacity of each collection.
    watch_buffer: usize,
}

/// The in-memory object store.
pub struct Store {
    state: Mutex<State>,
    history: usize,
}

/// Events a watch may fall behind by before it is ended (the client then
/// watches again from its last resourceVersion), unless a store is made
/// with another: [`Store::with_watch_buffer`].
pub const WATCH_BUFFER: usize = 4096;

/// Work left after a removal: garbage collection and namespace cleanup run
/// until nothing more changes.
enum Followup {
    Removed {
        uid: String,
        namespace: String,
        owners: Vec<String>,
    },
}

impl Store {
    /// A store with the built-in kinds and the standard namespaces.
    pub fn new(history: usize) -> Self {
        Self::with_watch_buffer(history, WATCH_BUFFER)
    }

    /// A store whose watches may fall `watch_buffer` events behind. Every
    /// resource preallocates that many slots (about 40 bytes each), so a
    /// rig of thousands of small stores keeps it small.
    pub fn with_watch_buffer(history: usize, watch_buffer: usize) -> Self {
        let store = Self {
            state: Mutex::new(State {
                rv: 1,
                resources: Vec::new(),
                collections: HashMap::new(),
                uids: HashMap::new(),
                watch_buffer: watch_buffer.max(1),
            }),
            history: history.max(1),
        };
        for spec in builtins() {
            store.register(spec);
        }
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let spec = store
                .resolve("", "v1", "namespaces")
                .expect("namespaces are built in");
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            store
                .create(
                    &spec,
                    "",
                    obj,
                    &WriteOptions {
                        manager: "memkube".into(),
                        ..Default::default()
                    },
                )
                .expect("standard namespaces are valid");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug that a test reports anyway; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers (or replaces) a resource at a group version.
    pub fn register(&self, spec: ResourceSpec) {
        let mut st = self.lock();
        st.register(spec);
    }

    /// All served resources.
    pub fn resources(&self) -> Vec<ResourceSpec> {
        self.lock().resources.clone()
    }

    /// The resource served at `group/version/plural`.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<ResourceSpec> {
        self.lock()
            .resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// Current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Reads one object.
    pub fn get(&self, spec: &ResourceSpec, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
        let st = self.lock();
        st.get(spec, ns, name)
            .ok_or_else(|| ApiError::not_found(&spec.group, &spec.plural, name))
    }

    /// Lists objects, with selectors and `limit`/`continue` paging.
    pub fn list(
        &self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> ApiResult<ListPage> {
        let st = self.lock();
        let start = match continue_token {
            Some(t) => Some(decode_continue(t)?),
            None => None,
        };
        if let Some((_, token_rv)) = &start {
            let col = st.collections.get(&spec.group_resource());
            if col.is_some_and(|c| c.evicted > *token_rv) {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
        }
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0usize;
        if let Some(col) = st.collections.get(&spec.group_resource()) {
            let lower = match &start {
                Some((k, _)) => std::ops::Bound::Excluded(k.clone()),
                None => match ns {
                    Some(n) => std::ops::Bound::Included((n.to_string(), String::new())),
                    None => std::ops::Bound::Unbounded,
                },
            };
            for (key, obj) in col.objects.range((lower, std::ops::Bound::Unbounded)) {
                if ns.is_some_and(|n| key.0 != n) {
                    break;
                }
                if !labels.matches(obj) || !fields.matches(obj) {
                    continue;
                }
                if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                    if next.is_none() {
                        next = Some(encode_continue(items_last_key(&items), st.rv));
                    }
                    remaining += 1;
                    continue;
                }
                items.push(obj.clone());
            }
        }
        let rv = start.map(|(_, rv)| rv).unwrap_or(st.rv);
        Ok(ListPage {
            items,
            rv,
            remaining: next.as_ref().map(|_| remaining),
            continue_token: next,
        })
    }

    /// Starts a watch: replays history after `from` (410 if it was
    /// compacted away) or sends the current objects as ADDED when `from` is None.
    pub fn subscribe(
        &self,
        spec: &ResourceSpec,
        from: Option<u64>,
        ns: Option<&str>,
    ) -> ApiResult<Subscription> {
        let mut st = self.lock();
        let rv = st.rv;
        let col = st.collection(spec);
        let rx = col.tx.subscribe();
        let initial = match from {
            Some(from) => {
                if from < col.evicted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {from} ({})",
                        col.evicted + 1
                    )));
                }
                col.history
                    .iter()
                    .filter(|e| e.rv > from)
                    .cloned()
                    .collect()
            }
            None => col
                .objects
                .iter()
                .filter(|(k, _)| ns.is_none_or(|n| k.0 == n))
                .map(|(_, o)| {
                    Arc::new(Event {
                        rv: rv_of(o),
                        kind: EventType::Added,
                        object: o.clone(),
                        previous: None,
                    })
                })
                .collect(),
        };
        Ok(Subscription {
            initial,
            rx,
            rv: from.unwrap_or(rv),
        })
    }

    /// Creates an object (POST).
    pub fn create(
        &self,
        spec: &ResourceSpec,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let mut st = self.lock();
        prepare_body(spec, ns, None, &mut obj)?;
        if obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            let Some(prefix) = obj
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
            else {
                return Err(ApiError::invalid(
                    &spec.kind,
                    &spec.group,
                    "",
                    vec![(
                        "metadata.name".into(),
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            };
            let suffix: String = uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .take(5)
                .collect();
            obj["metadata"]["name"] = json!(format!("{prefix}{suffix}"));
        }
        let name = name_of(&obj).to_string();
        if st.get(spec, ns, &name).is_some() {
            return Err(ApiError::already_exists(&spec.group, &spec.plural, &name));
        }
        st.check_namespace(spec, ns)?;
        normalize(spec, &mut obj);
        crd::validate(spec, &mut obj, opts.strict)?;
        crate::validate::object(spec, &obj)?;
        let now = now();
        st.stamp_new(spec, &mut obj, &now);
        let ti = type_info(spec);
        let w = Writer {
            manager: &opts.manager,
            api_version: &spec.api_version(),
            subresource: None,
            now: &now,
        };
        apply::track_update(None, &mut obj, &w, &ti)?;
        if spec.group == "apiextensions.k8s.io" && spec.plural == "customresourcedefinitions" {
            crd::resources_from_crd(&obj)?;
            obj["status"] = crd::accepted_status(&obj, &now);
        }
        if opts.dry_run {
            return Ok(obj);
        }
        let stored = st.commit(spec, ns, &name, None, Some(obj), self.history);
        Ok(stored.as_deref().cloned().unwrap_or(Value::Null))
    }

    /// Replaces an object (PUT), with optimistic concurrency on resourceVersion.
    pub fn update(
        &self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let mut st = self.lock();
        prepare_body(spec, ns, Some(name), &mut obj)?;
        let old = st
            .get(spec, ns, name)
            .ok_or_else(|| ApiError::not_found(&spec.group, &spec.plural, name))?;
        if let Some(rv) = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && !rv.is_empty()
            && rv != rv_of(&old).to_string()
        {
            return Err(ApiError::stale(&spec.group, &spec.plural, name));
        }
        self.finish_update(&mut st, spec, ns, name, old, obj, opts, false)
    }

    /// Patches an object (PATCH), or creates it for server-side apply.
    pub fn patch(
        &self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        body: PatchBody,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let mut st = self.lock();
        let ti = type_info(spec);
        let old = st.get(spec, ns, name);
        let status_only = opts.subresource.as_deref() == Some("status");
        if let PatchBody::Apply(mut config) = body {
            if opts.manager.is_empty() {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            prepare_body(spec, ns, Some(name), &mut config)?;
            restrict_to_endpoint(spec, status_only, &mut config);
            let now = now();
            let sub = opts.subresource.as_deref();
            let api_version = spec.api_version();
            let w = Writer {
                manager: &opts.manager,
                api_version: &api_version,
                subresource: sub,
                now: &now,
            };
            let mut new = apply::apply(old.as_deref(), &config, &w, opts.force, &ti)?;
            return match old {
                None => {
                    if status_only {
                        return Err(ApiError::not_found(&spec.group, &spec.plural, name));
                    }
                    st.check_namespace(spec, ns)?;
                    new["apiVersion"] = json!(api_version);
                    new["kind"] = json!(spec.kind);
                    normalize(spec, &mut new);
                    crd::validate(spec, &mut new, opts.strict)?;
                    crate::validate::object(spec, &new)?;
                    st.stamp_new(spec, &mut new, &now);
                    if opts.dry_run {
                        return Ok(new);
                    }
                    let stored = st.commit(spec, ns, name, None, Some(new), self.history);
                    Ok(stored.as_deref().cloned().unwrap_or(Value::Null))
                }
                Some(old) => self.finish_update(&mut st, spec, ns, name, old, new, opts, true),
            };
        }
        let old = old.ok_or_else(|| ApiError::not_found(&spec.group, &spec.plural, name))?;
        let mut new = (*old).clone();
        match body {
            PatchBody::Merge(p) => apply::merge_patch(&mut new, &p),
            PatchBody::Strategic(p) => {
                if spec.crd.is_some() {
                    return Err(ApiError::unsupported_media_type(
                        "application/strategic-merge-patch+json",
                    ));
                }
                apply::strategic_merge(&mut new, &p, &ti)
            }
            PatchBody::Json(p) => apply::json_patch(&mut new, &p)?,
            PatchBody::Apply(_) => unreachable!("handled above"),
        }
        // A resourceVersion in the patch is a precondition.
        if let Some(rv) = new
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && rv != rv_of(&old).to_string()
        {
            return Err(ApiError::stale(&spec.group, &spec.plural, name));
        }
        prepare_body(spec, ns, Some(name), &mut new)?;
        self.finish_update(&mut st, spec, ns, name, old, new, opts, false)
    }

    /// The common tail of update, patch and apply: keep server-owned fields,
    /// separate status from the main resource, bump generation, track
    /// ownership, and skip the write if nothing changed.
    #[allow(clippy::too_many_arguments)]
    fn finish_update(
        &self,
        st: &mut State,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        old: Arc<Value>,
        mut new: Value,
        opts: &WriteOptions,
        applied: bool,
    ) -> ApiResult<Value> {
        let status_only = opts.subresource.as_deref() == Some("status");
        if status_only {
            // The status endpoint changes status only.
            let status = new.get("status").cloned();
            let managed = new.pointer("/metadata/managedFields").cloned();
            new = (*old).clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
            if let Some(m) = managed {
                new["metadata"]["managedFields"] = m;
            }
        } else if spec.has_status() {
            // The main endpoint ignores status when status is a subresource.
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
        }
        keep_server_fields(&old, &mut new);
        normalize(spec, &mut new);
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            let before: Vec<Value> = finalizers(&old);
            if finalizers(&new).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    format!(
                        "{} \"{name}\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                        spec.kind
                    ),
                ));
            }
        }
        crd::validate(spec, &mut new, opts.strict)?;
        crate::validate::object(spec, &new)?;
        if spec.generation && differs_outside_metadata_and_status(&old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            new["metadata"]["generation"] = json!(g + 1);
        }
        let now = now();
        if !applied {
            let ti = type_info(spec);
            let api_version = spec.api_version();
            let w = Writer {
                manager: &opts.manager,
                api_version: &api_version,
                subresource: opts.subresource.as_deref(),
                now: &now,
            };
            apply::track_update(Some(&old), &mut new, &w, &ti)?;
        }
        if spec.group == "apiextensions.k8s.io"
            && spec.plural == "customresourcedefinitions"
            && !status_only
        {
            crd::resources_from_crd(&new)?;
        }
        if *old == new {
            // No-op writes store nothing and bump no resourceVersion, as in Kubernetes.
            return Ok(new);
        }
        if opts.dry_run {
            return Ok(new);
        }
        let stored = st.commit(spec, ns, name, Some(old), Some(new), self.history);
        Ok(stored.as_deref().cloned().unwrap_or(Value::Null))
    }

    /// Deletes an object: sets deletionTimestamp while finalizers remain,
    /// otherwise removes it; dependents are garbage collected.
    pub fn delete(
        &self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let mut st = self.lock();
        let old = st
            .get(spec, ns, name)
            .ok_or_else(|| ApiError::not_found(&spec.group, &spec.plural, name))?;
        if opts
            .rv
            .as_ref()
            .is_some_and(|rv| *rv != rv_of(&old).to_string())
        {
            return Err(ApiError::stale(&spec.group, &spec.plural, name));
        }
        if opts.uid.as_ref().is_some_and(|u| {
            Some(u.as_str()) != old.pointer("/metadata/uid").and_then(Value::as_str)
        }) {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    opts.uid.clone().unwrap_or_default(),
                    uid_of(&old)
                ),
            ));
        }
        if opts.dry_run {
            return Ok((*old).clone());
        }
        let out = st.delete_object(spec, ns, name, opts.propagation.as_deref(), self.history);
        Ok(out)
    }

    /// Deletes every matching object (DELETE on a collection).
    pub fn delete_collection(
        &self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        opts: &DeleteOptions,
    ) -> ApiResult<Vec<Value>> {
        let page = self.list(spec, ns, labels, fields, None, None)?;
        let mut out = Vec::new();
        for o in page.items {
            let ns = o
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match self.delete(spec, ns, name_of(&o), opts) {
                Ok(v) => out.push(v),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

impl State {
    fn register(&mut self, spec: ResourceSpec) {
        self.resources.retain(|r| {
            !(r.group == spec.group && r.version == spec.version && r.plural == spec.plural)
        });
        let buffer = self.watch_buffer;
        self.collections
            .entry(spec.group_resource())
            .or_insert_with(|| Collection::new(buffer));
        self.resources.push(spec);
    }

    fn collection(&mut self, spec: &ResourceSpec) -> &mut Collection {
        let buffer = self.watch_buffer;
        self.collections
            .entry(spec.group_resource())
            .or_insert_with(|| Collection::new(buffer))
    }

    fn get(&self, spec: &ResourceSpec, ns: &str, name: &str) -> Option<Arc<Value>> {
        let ns = if spec.namespaced() { ns } else { "" };
        self.collections
            .get(&spec.group_resource())?
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    fn spec_for(&self, gr: &(String, String)) -> Option<ResourceSpec> {
        self.resources
            .iter()
            .find(|r| r.group == gr.0 && r.plural == gr.1)
            .cloned()
    }

    fn check_namespace(&self, spec: &ResourceSpec, ns: &str) -> ApiResult<()> {
        if !spec.namespaced() {
            return Ok(());
        }
        let key = (String::new(), ns.to_string());
        let nsobj = self
            .collections
            .get(&(String::new(), "namespaces".to_string()))
            .and_then(|c| c.objects.get(&key));
        match nsobj {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(o) if o.pointer("/metadata/deletionTimestamp").is_some() => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    spec.plural
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Server-set fields of a new object.
    fn stamp_new(&self, spec: &ResourceSpec, obj: &mut Value, now: &str) {
        let meta = obj["metadata"]
            .as_object_mut()
            .expect("prepare_body makes metadata an object");
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        if spec.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if spec.group.is_empty() && spec.plural == "namespaces" {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
    }

    /// Stores (or removes, with `new == None`) an object, assigns the next
    /// resourceVersion, records the event and notifies watchers. Returns the
    /// stored object. Removal triggers garbage collection.
    fn commit(
        &mut self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        old: Option<Arc<Value>>,
        new: Option<Value>,
        history: usize,
    ) -> Option<Arc<Value>> {
        let ns = if spec.namespaced() { ns } else { "" };
        // An object being deleted goes away with its last finalizer.
        let new = match new {
            Some(n)
                if n.pointer("/metadata/deletionTimestamp").is_some()
                    && finalizers(&n).is_empty() =>
            {
                // Watchers see one DELETED event carrying the final state, as from the API server.
                return self.remove(spec, ns, name, Some(Arc::new(n)), history);
            }
            other => other,
        };
        self.write(spec, ns, name, old, new, history)
    }

    fn write(
        &mut self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        old: Option<Arc<Value>>,
        new: Option<Value>,
        history: usize,
    ) -> Option<Arc<Value>> {
        let mut new = new?;
        self.rv += 1;
        let rv = self.rv;
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        let new = Arc::new(new);
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        if old.is_none() {
            self.uids.insert(
                uid_of(&new).to_string(),
                (spec.group_resource(), (ns.to_string(), name.to_string())),
            );
        }
        let is_crd =
            spec.group == "apiextensions.k8s.io" && spec.plural == "customresourcedefinitions";
        let col = self.collection(spec);
        col.objects
            .insert((ns.to_string(), name.to_string()), new.clone());
        push_event(
            col,
            Event {
                rv,
                kind,
                object: new.clone(),
                previous: old,
            },
            history,
        );
        if is_crd && let Ok(specs) = crd::resources_from_crd(&new) {
            for s in specs {
                self.register(s);
            }
        }
        Some(new)
    }

    /// Removes a stored object (DELETED event) and runs the follow-up work.
    fn remove(
        &mut self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        last: Option<Arc<Value>>,
        history: usize,
    ) -> Option<Arc<Value>> {
        let mut queue = VecDeque::new();
        let removed = self.remove_one(spec, ns, name, last, history, &mut queue);
        self.run_followups(queue, history);
        removed
    }

    fn remove_one(
        &mut self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        last: Option<Arc<Value>>,
        history: usize,
        queue: &mut VecDeque<Followup>,
    ) -> Option<Arc<Value>> {
        let key = (ns.to_string(), name.to_string());
        let col = self.collection(spec);
        let stored = col.objects.remove(&key)?;
        self.rv += 1;
        let rv = self.rv;
        let mut last = (*last.unwrap_or(stored)).clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        let last = Arc::new(last);
        let col = self.collection(spec);
        push_event(
            col,
            Event {
                rv,
                kind: EventType::Deleted,
                object: last.clone(),
                previous: Some(last.clone()),
            },
            history,
        );
        self.uids.remove(uid_of(&last));
        if spec.group == "apiextensions.k8s.io"
            && spec.plural == "customresourcedefinitions"
            && let Ok(specs) = crd::resources_from_crd(&last)
        {
            // Deleting a CRD deletes its objects and stops serving it.
            for s in &specs {
                let keys: Vec<Key> = self.collection(s).objects.keys().cloned().collect();
                for (ns, name) in keys {
                    self.remove_one(s, &ns, &name, None, history, queue);
                }
                self.resources
                    .retain(|r| !(r.group == s.group && r.plural == s.plural));
            }
        }
        queue.push_back(Followup::Removed {
            uid: uid_of(&last).to_string(),
            namespace: ns.to_string(),
            owners: owner_uids(&last),
        });
        Some(last)
    }

    /// Background garbage collection of dependents, foreground owners
    /// waiting on them, and terminating namespaces that became empty.
    fn run_followups(&mut self, mut queue: VecDeque<Followup>, history: usize) {
        while let Some(Followup::Removed {
            uid,
            namespace,
            owners,
        }) = queue.pop_front()
        {
            // Dependents whose owners are now all gone are deleted.
            let mut dependents = Vec::new();
            for (gr, col) in &self.collections {
                for (key, obj) in &col.objects {
                    let owners = owner_uids(obj);
                    if owners.contains(&uid)
                        && owners.iter().all(|o| !self.uids.contains_key(o.as_str()))
                    {
                        dependents.push((gr.clone(), key.clone()));
                    }
                }
            }
            for (gr, (ns, name)) in dependents {
                if let Some(spec) = self.spec_for(&gr) {
                    self.delete_inner(&spec, &ns, &name, Some("Background"), history, &mut queue);
                }
            }
            // Owners deleted in foreground wait for their dependents.
            for owner_uid in owners {
                self.release_foreground(&owner_uid, history, &mut queue);
            }
            if !namespace.is_empty() {
                self.finish_namespace(&namespace, history, &mut queue);
            }
        }
    }

    /// Removes the `foregroundDeletion` finalizer once no dependents remain.
    fn release_foreground(
        &mut self,
        owner_uid: &str,
        history: usize,
        queue: &mut VecDeque<Followup>,
    ) {
        let Some((gr, (ns, name))) = self.uids.get(owner_uid).cloned() else {
            return;
        };
        let Some(spec) = self.spec_for(&gr) else {
            return;
        };
        let Some(owner) = self.get(&spec, &ns, &name) else {
            return;
        };
        if !finalizers(&owner).iter().any(|f| f == "foregroundDeletion") {
            return;
        }
        let has_dependents = self.collections.values().any(|c| {
            c.objects
                .values()
                .any(|o| owner_uids(o).iter().any(|u| u == owner_uid))
        });
        if has_dependents {
            return;
        }
        let mut new = (*owner).clone();
        set_finalizers(
            &mut new,
            finalizers(&owner)
                .into_iter()
                .filter(|f| f != "foregroundDeletion")
                .collect(),
        );
        if finalizers(&new).is_empty() {
            let last = self.write(&spec, &ns, &name, Some(owner), Some(new), history);
            self.remove_one(&spec, &ns, &name, last, history, queue);
        } else {
            self.write(&spec, &ns, &name, Some(owner), Some(new), history);
        }
    }

    /// A terminating namespace goes away once it is empty.
    fn finish_namespace(&mut self, ns: &str, history: usize, queue: &mut VecDeque<Followup>) {
        let ns_key = (String::new(), ns.to_string());
        let ns_gr = (String::new(), "namespaces".to_string());
        let Some(nsobj) = self
            .collections
            .get(&ns_gr)
            .and_then(|c| c.objects.get(&ns_key))
            .cloned()
        else {
            return;
        };
        if nsobj.pointer("/metadata/deletionTimestamp").is_none() || !finalizers(&nsobj).is_empty()
        {
            return;
        }
        let empty = self
            .collections
            .iter()
            .all(|(gr, c)| *gr == ns_gr || !c.objects.keys().any(|k| k.0 == ns));
        if empty && let Some(spec) = self.spec_for(&ns_gr) {
            self.remove_one(&spec, "", ns, None, history, queue);
        }
    }

    fn delete_object(
        &mut self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        propagation: Option<&str>,
        history: usize,
    ) -> Value {
        let mut queue = VecDeque::new();
        let out = self.delete_inner(spec, ns, name, propagation, history, &mut queue);
        self.run_followups(queue, history);
        out.as_deref().cloned().unwrap_or(Value::Null)
    }

    /// Every object (group-resource, key, object) with an owner reference to `uid`.
    fn dependents(&self, uid: &str) -> Vec<((String, String), Key, Arc<Value>)> {
        self.collections
            .iter()
            .flat_map(|(gr, c)| {
                c.objects
                    .iter()
                    .filter(|(_, o)| owner_uids(o).iter().any(|u| u == uid))
                    .map(|(k, o)| (gr.clone(), k.clone(), o.clone()))
            })
            .collect()
    }

    fn delete_inner(
        &mut self,
        spec: &ResourceSpec,
        ns: &str,
        name: &str,
        propagation: Option<&str>,
        history: usize,
        queue: &mut VecDeque<Followup>,
    ) -> Option<Arc<Value>> {
        let old = self.get(spec, ns, name)?;
        let uid = uid_of(&old).to_string();
        let is_ns = spec.group.is_empty() && spec.plural == "namespaces";
        if propagation == Some("Orphan") {
            // Orphaned dependents lose their owner reference to this object.
            for (gr, (dns, dname), o) in self.dependents(&uid) {
                let Some(dspec) = self.spec_for(&gr) else {
                    continue;
                };
                let mut n = (*o).clone();
                if let Some(refs) = n
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                }
                self.write(&dspec, &dns, &dname, Some(o), Some(n), history);
            }
        }
        let mut fins = finalizers(&old);
        if propagation == Some("Foreground") && !fins.iter().any(|f| f == "foregroundDeletion") {
            fins.push(json!("foregroundDeletion"));
        }
        if fins.is_empty() && !is_ns {
            return self.remove_one(spec, ns, name, None, history, queue);
        }
        // Finalizers (or namespace content) hold the object: mark it deleted.
        let mut new = (*old).clone();
        if old.pointer("/metadata/deletionTimestamp").is_none() {
            new["metadata"]["deletionTimestamp"] = json!(now());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if let Some(g) = old.pointer("/metadata/generation").and_then(Value::as_i64) {
                new["metadata"]["generation"] = json!(g + 1);
            }
        }
        set_finalizers(&mut new, fins);
        if is_ns {
            new["status"] = json!({"phase": "Terminating"});
        }
        let written = if *old == new {
            Some(old)
        } else {
            self.write(spec, ns, name, Some(old), Some(new), history)
        };
        if is_ns {
            // Delete the namespace's content; the namespace goes when it is empty.
            let contents: Vec<_> = self
                .collections
                .iter()
                .flat_map(|(gr, c)| {
                    c.objects
                        .keys()
                        .filter(|k| k.0 == name)
                        .map(|k| (gr.clone(), k.clone()))
                })
                .collect();
            for (gr, (cns, cname)) in contents {
                if let Some(cspec) = self.spec_for(&gr)
                    && cspec.scope == Scope::Namespaced
                {
                    self.delete_inner(&cspec, &cns, &cname, Some("Background"), history, queue);
                }
            }
            self.finish_namespace(name, history, queue);
            return written;
        }
        if propagation == Some("Foreground") {
            for (gr, (dns, dname), _) in self.dependents(&uid) {
                if let Some(dspec) = self.spec_for(&gr) {
                    self.delete_inner(&dspec, &dns, &dname, Some("Foreground"), history, queue);
                }
            }
            self.release_foreground(&uid, history, queue);
        }
        written
    }
}

fn push_event(col: &mut Collection, event: Event, history: usize) {
    let event = Arc::new(event);
    col.history.push_back(event.clone());
    while col.history.len() > history {
        if let Some(e) = col.history.pop_front() {
            col.evicted = e.rv;
        }
    }
    // No receivers is fine: nobody watches.
    let _ = col.tx.send(event);
}

/// Checks and completes the body of a write: kind, apiVersion, name and namespace.
fn prepare_body(
    spec: &ResourceSpec,
    ns: &str,
    name: Option<&str>,
    obj: &mut Value,
) -> ApiResult<()> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    if let Some(k) = map.get("kind").and_then(Value::as_str)
        && k != spec.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind of the provided object ({k}) does not match the resource ({})",
            spec.kind
        )));
    }
    map.insert("kind".into(), json!(spec.kind));
    map.insert("apiVersion".into(), json!(spec.api_version()));
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    if spec.namespaced() {
        match meta.get("namespace").and_then(Value::as_str) {
            Some(n) if n != ns && !n.is_empty() => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta.insert("namespace".into(), json!(ns));
            }
        }
    } else {
        meta.remove("namespace");
    }
    if let Some(want) = name {
        match meta.get("name").and_then(Value::as_str) {
            Some(n) if n != want => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({want})"
                )));
            }
            _ => {
                meta.insert("name".into(), json!(want));
            }
        }
    }
    if let Some(n) = meta.get("name").and_then(Value::as_str)
        && !n.is_empty()
        && !valid_name(spec, n)
    {
        return Err(ApiError::invalid(
            &spec.kind,
            &spec.group,
            n,
            vec![(
                "metadata.name".into(),
                format!(
                    "Invalid value: {n:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            )],
        ));
    }
    Ok(())
}

/// Conversions the API server does on write: a Secret's `stringData` is
/// merged into `data` (base64) and dropped.
fn normalize(spec: &ResourceSpec, obj: &mut Value) {
    use base64::Engine;
    if !(spec.group.is_empty() && spec.plural == "secrets") {
        return;
    }
    let Some(string_data) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    let Some(entries) = string_data.as_object() else {
        return;
    };
    let mut merged = obj
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, v) in entries {
        let text = v.as_str().unwrap_or_default();
        merged.insert(
            k.clone(),
            json!(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    obj["data"] = Value::Object(merged);
}

fn valid_name(spec: &ResourceSpec, n: &str) -> bool {
    if spec.group == "rbac.authorization.k8s.io" {
        // RBAC names are path segments (`system:...` is allowed).
        return n != "." && n != ".." && !n.contains('/') && !n.contains('%');
    }
    n.len() <= 253
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Main-resource apply ignores status; status apply keeps only status.
fn restrict_to_endpoint(spec: &ResourceSpec, status_only: bool, config: &mut Value) {
    let Some(m) = config.as_object_mut() else {
        return;
    };
    if status_only {
        m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace"));
        }
    } else if spec.has_status() {
        m.remove("status");
    }
}

/// Clients cannot change uid, creationTimestamp, deletionTimestamp,
/// generation or resourceVersion.
fn keep_server_fields(old: &Value, new: &mut Value) {
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match old.pointer(&format!("/metadata/{f}")) {
            Some(v) => new["metadata"][f] = v.clone(),
            None => {
                new["metadata"].as_object_mut().map(|m| m.remove(f));
            }
        }
    }
}

fn differs_outside_metadata_and_status(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(a) != strip(b)
}

fn finalizers(v: &Value) -> Vec<Value> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn set_finalizers(v: &mut Value, f: Vec<Value>) {
    if f.is_empty() {
        v["metadata"]
            .as_object_mut()
            .map(|m| m.remove("finalizers"));
    } else {
        v["metadata"]["finalizers"] = Value::Array(f);
    }
}

fn owner_uids(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.name` of an object.
pub fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn uid_of(v: &Value) -> &str {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// resourceVersion of a stored object.
pub fn rv_of(v: &Value) -> u64 {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn type_info(spec: &ResourceSpec) -> TypeInfo<'_> {
    TypeInfo::new(
        spec.schema
            .as_ref()
            .map(|s| &s.openapi)
            .filter(|s| !s.is_null()),
    )
}

fn items_last_key(items: &[Arc<Value>]) -> Key {
    items
        .last()
        .map(|o| {
            (
                o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                name_of(o).to_string(),
            )
        })
        .unwrap_or_default()
}

fn encode_continue(key: Key, rv: u64) -> String {
    use base64::Engine;
    let raw = json!({"ns": key.0, "name": key.1, "rv": rv}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> ApiResult<(Key, u64)> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let s = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(bad)
    };
    Ok((
        (s("ns")?, s("name")?),
        v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?,
    ))
}

/// Current time in RFC 3339 with seconds, as metav1.Time serialises.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
