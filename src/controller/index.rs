//! A secondary index over a watch cache: objects filed under keys that a
//! function of the object gives (the hosts a route object routes, the
//! object that controls it), kept up to date from the same watch events
//! that fill the cache.
//!
//! Why: every reconciliation asks the route caches two questions, "does
//! anyone else route my hosts?" and "which routes do I control?". With
//! thousands of clusters on one shared ingress, answering them by looking
//! through every cached route made each reconciliation cost time in
//! proportion to the number of clusters, and convergence grow with its
//! square. A lookup costs the same at any size.
//!
//! The index may lag the cache by an event (both are written by the one
//! watch task, the cache first): what it returns is read back from the
//! cache, and callers check each object as they would have during a full
//! look.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    sync::{Arc, Mutex},
};

use kube::{
    Resource,
    runtime::{reflector::ObjectRef, watcher},
};

/// The keys an object is filed under.
pub type KeyFn<K> = dyn Fn(&K) -> Vec<String> + Send + Sync;

/// Objects of one watch by key.
pub struct Index<K>
where
    K: Resource + 'static,
    K::DynamicType: Clone + Eq + Hash,
{
    keys: Box<KeyFn<K>>,
    dyntype: K::DynamicType,
    state: Mutex<State>,
}

/// An object by namespace and name: an [`ObjectRef`] of a dynamic kind
/// carries a copy of its kind's names, and the index holds thousands.
type Name = (Option<String>, String);

#[derive(Default)]
struct State {
    by_key: HashMap<String, HashSet<Name>>,
    keys_of: HashMap<Name, Vec<String>>,
    /// A re-list in progress: its objects replace the index when it is done,
    /// as they replace the cache (objects deleted meanwhile send no event).
    relist: Option<Vec<(Name, Vec<String>)>>,
}

impl State {
    fn remove(&mut self, object: &Name) {
        for key in self.keys_of.remove(object).into_iter().flatten() {
            if let Some(objects) = self.by_key.get_mut(&key) {
                objects.remove(object);
                if objects.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, object: Name, keys: Vec<String>) {
        for key in &keys {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(object.clone());
        }
        if !keys.is_empty() {
            self.keys_of.insert(object, keys);
        }
    }
}

impl<K> Index<K>
where
    K: Resource + 'static,
    K::DynamicType: Clone + Eq + Hash,
{
    /// An empty index that files each object under `keys(object)`.
    pub fn new(
        dyntype: K::DynamicType,
        keys: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Index {
            keys: Box::new(keys),
            dyntype,
            state: Mutex::default(),
        })
    }

    /// Follows one event of the watch that fills the cache.
    pub fn observe(&self, event: &watcher::Event<K>) {
        let name = |object: &K| {
            let meta = object.meta();
            (
                meta.namespace.clone(),
                meta.name.clone().unwrap_or_default(),
            )
        };
        let entry = |object: &K| (name(object), (self.keys)(object));
        let mut state = self.state.lock().expect("index lock");
        match event {
            watcher::Event::Apply(object) => {
                let (object, keys) = entry(object);
                state.remove(&object);
                state.insert(object, keys);
            }
            watcher::Event::Delete(object) => {
                state.remove(&name(object));
            }
            watcher::Event::Init => state.relist = Some(Vec::new()),
            watcher::Event::InitApply(object) => {
                let entry = entry(object);
                state.relist.get_or_insert_with(Vec::new).push(entry);
            }
            watcher::Event::InitDone => {
                let listed = state.relist.take().unwrap_or_default();
                state.by_key.clear();
                state.keys_of.clear();
                for (object, keys) in listed {
                    state.insert(object, keys);
                }
            }
        }
    }

    /// The objects filed under `key`.
    pub fn get(&self, key: &str) -> Vec<ObjectRef<K>> {
        let state = self.state.lock().expect("index lock");
        state
            .by_key
            .get(key)
            .into_iter()
            .flatten()
            .map(|(namespace, name)| {
                let object = ObjectRef::new_with(name, self.dyntype.clone());
                match namespace {
                    Some(namespace) => object.within(namespace),
                    None => object,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::json;

    use super::*;

    fn object(name: &str, hosts: &[&str]) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Thing",
            "metadata": {"name": name, "namespace": "ns"}, "hosts": hosts}))
        .unwrap()
    }

    fn index() -> Arc<Index<DynamicObject>> {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Thing"));
        Index::new(resource, |o: &DynamicObject| {
            o.data["hosts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(String::from))
                .collect()
        })
    }

    fn names(index: &Index<DynamicObject>, key: &str) -> Vec<String> {
        let mut names: Vec<String> = index.get(key).into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn objects_are_found_by_their_current_keys() {
        let index = index();
        index.observe(&watcher::Event::Apply(object("a", &["x", "y"])));
        index.observe(&watcher::Event::Apply(object("b", &["y"])));
        assert_eq!(names(&index, "y"), ["a", "b"]);
        // A changed object is filed under its new keys only.
        index.observe(&watcher::Event::Apply(object("a", &["z"])));
        assert_eq!(names(&index, "x"), Vec::<String>::new());
        assert_eq!(names(&index, "y"), ["b"]);
        assert_eq!(names(&index, "z"), ["a"]);
        index.observe(&watcher::Event::Delete(object("b", &["y"])));
        assert_eq!(names(&index, "y"), Vec::<String>::new());
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_is_done() {
        let index = index();
        index.observe(&watcher::Event::Apply(object("gone", &["x"])));
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(object("kept", &["x"])));
        // Until the list is complete, the index answers as the cache does:
        // from the last full state.
        assert_eq!(names(&index, "x"), ["gone"]);
        index.observe(&watcher::Event::InitDone);
        // An object deleted while the watch was down sends no Delete.
        assert_eq!(names(&index, "x"), ["kept"]);
    }
}
