//! memkube driven by the real `kube` client: typed and dynamic APIs,
//! watches, `kube::runtime::watcher` and `Controller`. Each test names the
//! Kubernetes rule it checks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Discovery};
use kube::runtime::{WatchStreamExt, watcher};
use memkube::{Options, RequestMatch, TestApi};
use serde_json::{Value, json};

fn cm(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .unwrap()
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.reason.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The next watch event that is not a bookmark.
async fn next_event<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    loop {
        match s.try_next().await.unwrap().unwrap() {
            WatchEvent::Bookmark(_) => continue,
            e => return e,
        }
    }
}

fn deployment(name: &str, env: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": "nginx", "env": env}]}},
        },
    })
}

fn env_names(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .as_ref()
        .map(|e| {
            e.iter()
                .map(|v| format!("{}={}", v.name, v.value.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

const WIDGETS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              hosts:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              routes:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
          status:
            type: object
            properties:
              ready: {type: boolean}
"#;

fn widgets(api: &TestApi) -> Api<DynamicObject> {
    let crd: Value = serde_saphyr::from_str(WIDGETS_CRD).unwrap();
    api.add_crd(crd).unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(api.client(), "default", &ar)
}

#[tokio::test]
async fn create_sets_uid_creation_timestamp_and_resource_version() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let c = cms
        .create(&PostParams::default(), &cm("a", &[], &[("k", "v")]))
        .await
        .unwrap();
    assert!(c.metadata.uid.is_some());
    assert!(c.metadata.creation_timestamp.is_some());
    assert!(c.metadata.resource_version.is_some());
    assert_eq!(c.metadata.namespace.as_deref(), Some("default"));
    let got = cms.get("a").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
}

#[tokio::test]
async fn create_of_an_existing_name_is_409_already_exists() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    let e = cms
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "AlreadyExists");
    assert_eq!(code(e), 409);
}

#[tokio::test]
async fn get_of_a_missing_object_is_404_not_found() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    assert_eq!(code(cms.get("nope").await.unwrap_err()), 404);
    assert!(cms.get_opt("nope").await.unwrap().is_none());
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_404() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "ghost");
    assert_eq!(
        code(
            cms.create(&PostParams::default(), &cm("a", &[], &[]))
                .await
                .unwrap_err()
        ),
        404
    );
}

#[tokio::test]
async fn invalid_name_is_422_invalid_naming_the_field() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let e = cms
        .create(&PostParams::default(), &cm("Not_Valid", &[], &[]))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else { panic!() };
    assert!(s.message.contains("metadata.name"), "{}", s.message);
    assert_eq!(code(e), 422);
}

#[tokio::test]
async fn generate_name_gets_a_random_suffix() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let mut c = ConfigMap::default();
    c.metadata.generate_name = Some("gen-".into());
    let made = cms.create(&PostParams::default(), &c).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
}

#[tokio::test]
async fn update_with_a_stale_resource_version_is_409_conflict_optimistic_concurrency() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let v1 = cms
        .create(&PostParams::default(), &cm("a", &[], &[("k", "1")]))
        .await
        .unwrap();
    let mut v2 = v1.clone();
    v2.data = Some(BTreeMap::from([("k".into(), "2".into())]));
    let v2 = cms.replace("a", &PostParams::default(), &v2).await.unwrap();
    assert_ne!(v1.metadata.resource_version, v2.metadata.resource_version);
    let e = cms
        .replace("a", &PostParams::default(), &v1)
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "Conflict");
    assert_eq!(code(e), 409);
}

#[tokio::test]
async fn no_op_writes_do_not_bump_the_resource_version() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let v1 = cms
        .create(&PostParams::default(), &cm("a", &[], &[("k", "1")]))
        .await
        .unwrap();
    let v2 = cms.replace("a", &PostParams::default(), &v1).await.unwrap();
    let v3 = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(v1.metadata.resource_version, v2.metadata.resource_version);
    assert_eq!(v1.metadata.resource_version, v3.metadata.resource_version);
}

#[tokio::test]
async fn list_label_selectors_equality_and_set_based() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    for (n, app, tier) in [("a", "web", "fe"), ("b", "web", "be"), ("c", "db", "be")] {
        cms.create(
            &PostParams::default(),
            &cm(n, &[("app", app), ("tier", tier)], &[]),
        )
        .await
        .unwrap();
    }
    let names = |l: kube::api::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app=web"))
                .await
                .unwrap()
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app=web,tier!=fe"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app in (db,x)"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("!missing,tier notin (be)"))
                .await
                .unwrap()
        ),
        ["a"]
    );
}

#[tokio::test]
async fn list_field_selector_on_metadata_name_and_namespace() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("b", &[], &[]))
        .await
        .unwrap();
    let all: Api<ConfigMap> = Api::all(api.client());
    let l = all
        .list(&ListParams::default().fields("metadata.name=b,metadata.namespace=default"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].metadata.name.as_deref(), Some("b"));
}

#[tokio::test]
async fn list_limit_and_continue_page_through_all_objects() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    for i in 0..7 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[], &[]))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = cms.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        seen.extend(page.items.into_iter().map(|c| c.metadata.name.unwrap()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen, (0..7).map(|i| format!("c{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn list_continue_token_older_than_history_is_410_gone() {
    let api = TestApi::start_with(Options {
        history: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[], &[]))
            .await
            .unwrap();
    }
    let page = cms.list(&ListParams::default().limit(1)).await.unwrap();
    let token = page.metadata.continue_.unwrap();
    for i in 3..6 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[], &[]))
            .await
            .unwrap();
    }
    let e = cms
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap_err();
    assert_eq!(code(e), 410);
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_only_later_events() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let a = cms
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("b", &[], &[]))
        .await
        .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let rv = a.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("b")),
        other => panic!("{other:?}"),
    }
    match next_event(&mut s).await {
        WatchEvent::Deleted(c) => assert_eq!(c.metadata.name.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_synthetic_added_events() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(next_event(&mut s).await, WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("a"))
    );
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Modified(_)));
}

#[tokio::test]
async fn watch_with_label_selector_turns_label_changes_into_added_and_deleted() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let c = cms
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    let rv = c.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default().labels("app=web"), &rv)
        .await
        .unwrap()
        .boxed();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Deleted(_)));
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_is_410_gone() {
    let api = TestApi::start_with(Options {
        history: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let first = cms
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    for i in 0..5 {
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_bookmarks_when_allowed() {
    let api = TestApi::start_with(Options {
        bookmark_interval: Duration::from_millis(20),
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let c = cms
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    let rv = c.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert!(
            b.metadata.resource_version.parse::<u64>().unwrap() >= rv.parse::<u64>().unwrap()
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn watcher_relists_after_410_gone() {
    let api = TestApi::start_with(Options {
        history: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(&PostParams::default(), &cm("seed", &[], &[]))
        .await
        .unwrap();
    let mut events = watcher(cms.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    while !matches!(
        events.try_next().await.unwrap(),
        Some(watcher::Event::InitDone)
    ) {}
    // Keep the watcher away while more changes than the history holds happen.
    api.fail_next(usize::MAX, RequestMatch::new("watch", "/configmaps"), 503);
    api.drop_watches();
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[], &[]))
            .await
            .unwrap();
    }
    api.clear_faults();
    // The resumed watch gets 410 Gone, so the watcher lists again and sees everything.
    let mut relisted = Vec::new();
    let mut saw_gone = false;
    loop {
        match events.next().await.unwrap() {
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(c)) => relisted.push(c.metadata.name.unwrap()),
            Ok(watcher::Event::InitDone) if saw_gone => break,
            Ok(_) => {}
            // The watcher reports the failed resume, then relists.
            Err(watcher::Error::WatchError(s)) if s.code == 410 => saw_gone = true,
            Err(_) => {}
        }
    }
    assert_eq!(relisted.len(), 6, "{relisted:?}");
}

#[tokio::test]
async fn merge_patch_rfc7386_replaces_lists_and_deletes_nulls() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(
        &PostParams::default(),
        &cm("a", &[], &[("x", "1"), ("y", "2")]),
    )
    .await
    .unwrap();
    let c = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": null, "z": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        c.data.unwrap().keys().cloned().collect::<Vec<_>>(),
        ["y", "z"]
    );
}

#[tokio::test]
async fn strategic_merge_patch_merges_env_by_name() {
    let api = TestApi::start().await;
    let deps: Api<Deployment> = Api::default_namespaced(api.client());
    let d = serde_json::from_value(deployment(
        "web",
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
    ))
    .unwrap();
    deps.create(&PostParams::default(), &d).await.unwrap();
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "x"}, {"name": "C", "value": "3"}]}]}}}});
    let d = deps
        .patch("web", &PatchParams::default(), &Patch::Strategic(p))
        .await
        .unwrap();
    assert_eq!(env_names(&d), ["A=1", "B=x", "C=3"]);
}

#[tokio::test]
async fn server_side_apply_creates_and_records_the_manager_as_apply() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let c = cms
        .patch(
            "a",
            &PatchParams::apply("mgr"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}})),
        )
        .await
        .unwrap();
    let mf = c.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("mgr"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&mf[0].fields_v1).unwrap();
    assert_eq!(fields, json!({"f:data": {"f:k": {}}}));
}

#[tokio::test]
async fn server_side_apply_by_two_managers_merges_env_entries_by_name() {
    let api = TestApi::start().await;
    let deps: Api<Deployment> = Api::default_namespaced(api.client());
    let first = deployment(
        "web",
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
    );
    deps.patch("web", &PatchParams::apply("one"), &Patch::Apply(first))
        .await
        .unwrap();
    let second = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "env": [{"name": "C", "value": "3"}, {"name": "D", "value": "4"}]}]}}}});
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("two"),
            &Patch::Apply(second.clone()),
        )
        .await
        .unwrap();
    assert_eq!(env_names(&d), ["A=1", "B=2", "C=3", "D=4"]);
    // Manager two drops D: only its own entry goes, the others stay.
    let mut less = second;
    less["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "C", "value": "3"}]);
    let d = deps
        .patch("web", &PatchParams::apply("two"), &Patch::Apply(less))
        .await
        .unwrap();
    assert_eq!(env_names(&d), ["A=1", "B=2", "C=3"]);
}

#[tokio::test]
async fn server_side_apply_conflict_is_409_unless_forced() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let cfg =
        |v: &str| Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": v}}));
    cms.patch("a", &PatchParams::apply("one"), &cfg("1"))
        .await
        .unwrap();
    // The same value is shared ownership, not a conflict.
    cms.patch("a", &PatchParams::apply("two"), &cfg("1"))
        .await
        .unwrap();
    let e = cms
        .patch("a", &PatchParams::apply("three"), &cfg("3"))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else { panic!() };
    assert!(s.message.contains("conflict with \"one\""), "{}", s.message);
    assert_eq!(code(e), 409);
    let c = cms
        .patch("a", &PatchParams::apply("three").force(), &cfg("3"))
        .await
        .unwrap();
    assert_eq!(c.data.unwrap()["k"], "3");
    let owners: Vec<_> = c
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(
        owners,
        ["three"],
        "forcing takes the field from every other manager"
    );
}

#[tokio::test]
async fn server_side_apply_conflicts_with_an_update_manager() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(
        &PostParams {
            field_manager: Some("creator".into()),
            ..Default::default()
        },
        &cm("a", &[], &[("k", "1")]),
    )
    .await
    .unwrap();
    let e = cms
        .patch(
            "a",
            &PatchParams::apply("applier"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "2"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), 409);
}

#[tokio::test]
async fn server_side_apply_removes_fields_the_manager_stops_applying() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let apply =
        |data: Value| Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data}));
    cms.patch(
        "a",
        &PatchParams::apply("one"),
        &apply(json!({"a": "1", "b": "2"})),
    )
    .await
    .unwrap();
    cms.patch(
        "a",
        &PatchParams::apply("other"),
        &apply(json!({"b": "2", "c": "3"})),
    )
    .await
    .unwrap();
    let c = cms
        .patch("a", &PatchParams::apply("one"), &apply(json!({})))
        .await
        .unwrap();
    // a was only one's and goes; b is still other's and stays.
    assert_eq!(
        c.data.unwrap().keys().cloned().collect::<Vec<_>>(),
        ["b", "c"]
    );
}

#[tokio::test]
async fn server_side_apply_treats_tolerations_as_atomic() {
    let api = TestApi::start().await;
    let deps: Api<Deployment> = Api::default_namespaced(api.client());
    let mut d = deployment("web", json!([]));
    d["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "a", "operator": "Exists"}]);
    deps.patch("web", &PatchParams::apply("one"), &Patch::Apply(d.clone()))
        .await
        .unwrap();
    d["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "b", "operator": "Exists"}]);
    let e = deps
        .patch("web", &PatchParams::apply("two"), &Patch::Apply(d.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        code(e),
        409,
        "an atomic list is one field: different content conflicts"
    );
    let got = deps
        .patch("web", &PatchParams::apply("two").force(), &Patch::Apply(d))
        .await
        .unwrap();
    let tol = got
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .tolerations
        .unwrap();
    assert_eq!(tol.len(), 1);
    assert_eq!(tol[0].key.as_deref(), Some("b"));
}

#[tokio::test]
async fn server_side_apply_honours_crd_list_map_keys_and_sets() {
    let api = TestApi::start().await;
    let w = widgets(&api);
    let obj = |routes: Value, hosts: Value| {
        Patch::Apply(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 1, "routes": routes, "hosts": hosts}}),
        )
    };
    w.patch(
        "w",
        &PatchParams::apply("one"),
        &obj(json!([{"name": "a", "port": 1}]), json!(["x"])),
    )
    .await
    .unwrap();
    let got = w
        .patch(
            "w",
            &PatchParams::apply("two"),
            &obj(json!([{"name": "b", "port": 2}]), json!(["y"])),
        )
        .await
        .unwrap();
    assert_eq!(
        got.data["spec"]["routes"],
        json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}])
    );
    assert_eq!(got.data["spec"]["hosts"], json!(["x", "y"]));
}

#[tokio::test]
async fn updates_record_an_update_manager_taking_the_changed_fields() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.patch(
        "a",
        &PatchParams::apply("one"),
        &Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "1", "j": "1"}}),
        ),
    )
    .await
    .unwrap();
    let c = cms
        .patch(
            "a",
            &PatchParams {
                field_manager: Some("patcher".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    let mf = c.metadata.managed_fields.unwrap();
    let patcher = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("patcher"))
        .unwrap();
    assert_eq!(patcher.operation.as_deref(), Some("Update"));
    assert_eq!(
        serde_json::to_value(&patcher.fields_v1).unwrap(),
        json!({"f:data": {"f:k": {}}})
    );
    let one = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("one"))
        .unwrap();
    assert_eq!(
        serde_json::to_value(&one.fields_v1).unwrap(),
        json!({"f:data": {"f:j": {}}})
    );
}

#[tokio::test]
async fn generation_is_bumped_on_spec_changes_only() {
    let api = TestApi::start().await;
    let deps: Api<Deployment> = Api::default_namespaced(api.client());
    let d = deps
        .create(
            &PostParams::default(),
            &serde_json::from_value(deployment("web", json!([]))).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );
    let d = deps
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(1),
        "status changes keep the generation"
    );
    let d = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
}

#[tokio::test]
async fn status_subresource_is_separate_from_the_main_resource() {
    let api = TestApi::start().await;
    let deps: Api<Deployment> = Api::default_namespaced(api.client());
    deps.create(
        &PostParams::default(),
        &serde_json::from_value(deployment("web", json!([]))).unwrap(),
    )
    .await
    .unwrap();
    // The main resource ignores status.
    let d = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 5}, "spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert!(d.status.is_none());
    assert_eq!(d.spec.unwrap().replicas, Some(5));
    // The status subresource ignores everything else.
    let d = deps
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 5}, "spec": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(d.status.unwrap().replicas, Some(5));
    assert_eq!(d.spec.unwrap().replicas, Some(5));
    let d = deps.get_status("web").await.unwrap();
    assert_eq!(d.status.unwrap().replicas, Some(5));
}

#[tokio::test]
async fn server_side_apply_to_status_records_the_status_subresource() {
    let api = TestApi::start().await;
    let w = widgets(&api);
    w.patch(
        "w",
        &PatchParams::apply("ctl"),
        &Patch::Apply(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"size": 1}}),
        ),
    )
    .await
    .unwrap();
    let got = w
        .patch_status("w", &PatchParams::apply("ctl"), &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"ready": true}})))
        .await
        .unwrap();
    assert_eq!(got.data["status"]["ready"], true);
    assert_eq!(
        got.data["spec"]["size"], 1,
        "a status apply leaves the spec alone"
    );
    let mf = got.metadata.managed_fields.unwrap();
    assert!(
        mf.iter().any(|m| m.subresource.as_deref() == Some("status")
            && m.operation.as_deref() == Some("Apply"))
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let mut c = cm("a", &[], &[]);
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let c = cms.create(&PostParams::default(), &c).await.unwrap();
    let rv = c.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let out = cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(
        out.is_left(),
        "the object is returned while finalizers hold it"
    );
    let held = cms.get("a").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(matches!(next_event(&mut s).await, WatchEvent::Modified(_)));
    // New finalizers cannot be added once deletion started.
    let e = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["a", "b"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), 422);
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Deleted(_)));
    assert!(cms.get_opt("a").await.unwrap().is_none());
}

fn owned_by(owner: &ConfigMap, name: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
        }]},
        "stringData": {"k": "v"},
    }))
    .unwrap()
}

#[tokio::test]
async fn owner_reference_background_cascade_deletes_dependents() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let secrets: Api<Secret> = Api::default_namespaced(api.client());
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[], &[]))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &owned_by(&owner, "dep"))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &cm_free_secret("free"))
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(secrets.get_opt("dep").await.unwrap().is_none());
    assert!(secrets.get_opt("free").await.unwrap().is_some());
}

fn cm_free_secret(name: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn owner_reference_orphan_keeps_dependents_without_the_reference() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let secrets: Api<Secret> = Api::default_namespaced(api.client());
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[], &[]))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &owned_by(&owner, "dep"))
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::orphan()).await.unwrap();
    let dep = secrets.get("dep").await.unwrap();
    assert!(dep.metadata.owner_references.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn owner_reference_foreground_deletes_dependents_first() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let secrets: Api<Secret> = Api::default_namespaced(api.client());
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[], &[]))
        .await
        .unwrap();
    let mut dep = owned_by(&owner, "dep");
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    secrets.create(&PostParams::default(), &dep).await.unwrap();
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let held = cms.get("owner").await.unwrap();
    assert_eq!(
        held.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert!(
        secrets
            .get("dep")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    secrets
        .patch(
            "dep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(secrets.get_opt("dep").await.unwrap().is_none());
    assert!(
        cms.get_opt("owner").await.unwrap().is_none(),
        "the owner goes once its dependents are gone"
    );
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_content() {
    let api = TestApi::start().await;
    let nss: Api<Namespace> = Api::all(api.client());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "team");
    cms.create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("a").await.unwrap().is_none());
    assert!(nss.get_opt("team").await.unwrap().is_none());
    let default_cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    assert!(default_cms.list(&ListParams::default()).await.is_ok());
}

#[tokio::test]
async fn a_terminating_namespace_refuses_new_content_with_403() {
    let api = TestApi::start().await;
    let nss: Api<Namespace> = Api::all(api.client());
    let ns = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "team");
    let mut held = cm("held", &[], &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    let terminating = nss.get("team").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    let e = cms
        .create(&PostParams::default(), &cm("new", &[], &[]))
        .await
        .unwrap_err();
    assert_eq!(code(e), 403);
    // Releasing the last object lets the namespace go.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(nss.get_opt("team").await.unwrap().is_none());
}

#[tokio::test]
async fn delete_collection_with_a_label_selector() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(&PostParams::default(), &cm("a", &[("x", "1")], &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("b", &[("x", "1")], &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("c", &[], &[]))
        .await
        .unwrap();
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("x=1"),
    )
    .await
    .unwrap();
    let left: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["c"]);
}

#[tokio::test]
async fn dry_run_stores_nothing() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let made = cms
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("a", &[], &[]),
        )
        .await
        .unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("a"));
    assert!(cms.get_opt("a").await.unwrap().is_none());
}

#[tokio::test]
async fn discovery_serves_builtin_and_crd_resources_for_dynamic_clients() {
    let api = TestApi::start().await;
    let w = widgets(&api);
    let discovery = Discovery::new(api.client()).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .unwrap();
    assert_eq!(ar.plural, "deployments");
    assert!(
        caps.subresources.iter().any(|(s, _)| s.plural == "status"),
        "{:?}",
        caps.subresources
    );
    let (ar, _) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    let dynamic: Api<DynamicObject> = Api::namespaced_with(api.client(), "default", &ar);
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}})).unwrap();
    dynamic.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(w.get("w").await.unwrap().data["spec"]["size"], 2);
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
            .is_some()
    );
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event"))
            .is_some()
    );
}

/// What client-go sends (haproxy-ingress, the local run's shared ingress,
/// is such a client): lists and watches prefer protobuf but accept
/// anything, and discovery asks for the aggregated format first, then
/// JSON. The API server picks the first type it can serve; here that is
/// JSON, labelled so, and the legacy discovery document, which client-go
/// falls back to by its content type.
#[tokio::test]
async fn clients_preferring_protobuf_or_aggregated_discovery_are_answered_json() {
    let api = TestApi::start().await;
    let client = api.client();
    let protobuf_first = "application/vnd.kubernetes.protobuf, */*";
    let aggregated_first = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    for (path, accept, kind) in [
        (
            "/api/v1/configmaps?limit=500&resourceVersion=0",
            protobuf_first,
            "ConfigMapList",
        ),
        (
            "/apis/networking.k8s.io/v1/ingresses?limit=500&resourceVersion=0",
            protobuf_first,
            "IngressList",
        ),
        ("/api", aggregated_first, "APIVersions"),
        ("/apis", aggregated_first, "APIGroupList"),
    ] {
        let request = http::Request::get(path)
            .header("accept", accept)
            .body(kube::client::Body::empty())
            .unwrap();
        let response = client.send(request).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{path}"
        );
        let body = response.into_body().collect_bytes().await.unwrap();
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["kind"], kind, "{path}: {doc}");
    }
}
#[tokio::test]
async fn registered_resources_are_discovered_and_served() {
    let api = TestApi::start().await;
    api.register(
        memkube::ResourceSpec::new(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            memkube::Scope::Cluster,
        )
        .with_short_names(&["sc"]),
    );
    let discovery = Discovery::new(api.client()).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "storage.k8s.io",
            "v1",
            "StorageClass",
        ))
        .unwrap();
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    let scs: Api<DynamicObject> = Api::all_with(api.client(), &ar);
    let sc: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "fast"}, "provisioner": "example.com/fast"}),
    )
    .unwrap();
    scs.create(&PostParams::default(), &sc).await.unwrap();
    assert_eq!(
        scs.get("fast").await.unwrap().data["provisioner"],
        "example.com/fast"
    );
}

#[tokio::test]
async fn crd_objects_are_validated_against_the_openapi_schema_with_422_invalid() {
    let api = TestApi::start().await;
    let w = widgets(&api);
    let bad: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 0}})).unwrap();
    let e = w.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(s) = &e else { panic!() };
    assert!(s.message.contains("spec.size"), "{}", s.message);
    assert_eq!(code(e), 422);
}

#[tokio::test]
async fn crd_unknown_fields_are_pruned() {
    let api = TestApi::start().await;
    let w = widgets(&api);
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "bogus": true}})).unwrap();
    let made = w.create(&PostParams::default(), &obj).await.unwrap();
    assert!(made.data["spec"].get("bogus").is_none());
}

#[tokio::test]
async fn deleting_a_crd_stops_serving_its_resource() {
    let api = TestApi::start().await;
    let w = widgets(&api);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(api.client());
    let crd = crds.get("widgets.example.com").await.unwrap();
    let established = crd
        .status
        .unwrap()
        .conditions
        .unwrap()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(code(w.list(&ListParams::default()).await.unwrap_err()), 404);
}

#[tokio::test]
async fn upstream_crds_load_and_are_enforced() {
    let api = TestApi::start().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/schemas");
    if !dir.exists() {
        eprintln!("skipping: {} is missing", dir.display());
        return;
    }
    let n = api.load_crds(&dir).unwrap();
    assert!(n >= 10, "{n}");
    let discovery = Discovery::new(api.client()).run().await.unwrap();
    let (ar, _) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta2",
            "Cluster",
        ))
        .unwrap();
    let clusters: Api<DynamicObject> = Api::namespaced_with(api.client(), "default", &ar);
    let bad: DynamicObject = serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c"},
        "spec": {"controlPlaneEndpoint": {"host": "h", "port": "not-a-number"}}})).unwrap();
    assert_eq!(
        code(
            clusters
                .create(&PostParams::default(), &bad)
                .await
                .unwrap_err()
        ),
        422
    );
}

#[tokio::test]
async fn fault_injection_fails_the_next_matching_requests() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    api.fail_next(2, RequestMatch::new("create", "/configmaps"), 500);
    assert_eq!(
        code(
            cms.create(&PostParams::default(), &cm("a", &[], &[]))
                .await
                .unwrap_err()
        ),
        500
    );
    assert_eq!(
        code(
            cms.create(&PostParams::default(), &cm("a", &[], &[]))
                .await
                .unwrap_err()
        ),
        500
    );
    cms.list(&ListParams::default()).await.unwrap();
    cms.create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
}

#[tokio::test]
async fn fault_injection_latency_delays_matching_requests() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    api.add_latency(
        RequestMatch::new("list", "/configmaps"),
        Duration::from_millis(200),
    );
    let t = std::time::Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    // A lower bound only: the delay must have been applied.
    assert!(t.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn dropped_watch_streams_end_and_watchers_resume() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    let mut raw = cms
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    let mut events = watcher(cms.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    cms.create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    assert!(raw.try_next().await.unwrap().is_some());
    assert_eq!(
        events
            .try_next()
            .await
            .unwrap()
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("a")
    );
    api.drop_watches();
    assert!(
        raw.try_next().await.unwrap().is_none(),
        "the raw stream ends"
    );
    cms.create(&PostParams::default(), &cm("b", &[], &[]))
        .await
        .unwrap();
    let next = events.try_next().await.unwrap().unwrap();
    assert_eq!(
        next.metadata.name.as_deref(),
        Some("b"),
        "the watcher resumed without a gap"
    );
}

#[tokio::test]
async fn request_log_records_verbs_paths_and_field_managers() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.patch(
        "a",
        &PatchParams::apply("me"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap"})),
    )
    .await
    .unwrap();
    cms.get("a").await.unwrap();
    let log = api.request_log();
    let apply = log.iter().find(|r| r.verb == "apply").unwrap();
    assert_eq!(apply.path, "/api/v1/namespaces/default/configmaps/a");
    assert_eq!(apply.field_manager.as_deref(), Some("me"));
    assert!(apply.is_write());
    assert!(log.iter().any(|r| r.verb == "get" && r.status == 200));
}

#[tokio::test]
async fn kubeconfig_of_one_instance_works_from_a_secret_in_another() {
    let mgmt = TestApi::start().await;
    let workload = TestApi::start_with(Options {
        name: "tenant".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::default_namespaced(mgmt.client());
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "tenant-kubeconfig"}, "stringData": {"value": workload.kubeconfig_yaml()}})).unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let got = secrets.get("tenant-kubeconfig").await.unwrap();
    let bytes = got.data.unwrap()["value"].0.clone();
    let kc = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&bytes).unwrap()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let nss: Api<Namespace> = Api::all(client);
    assert!(nss.get("default").await.is_ok());
    let wl_cms: Api<ConfigMap> = Api::default_namespaced(workload.client());
    assert!(
        wl_cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "the instances are separate"
    );
}

#[tokio::test]
async fn https_with_a_generated_ca_works_from_the_client_and_the_kubeconfig() {
    let api = TestApi::start_with(Options {
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(api.url().starts_with("https://127.0.0.1:"));
    let nss: Api<Namespace> = Api::all(api.client());
    assert!(nss.get("default").await.is_ok());
    let kc = kube::config::Kubeconfig::from_yaml(&api.kubeconfig_yaml()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let nss: Api<Namespace> = Api::all(kube::Client::try_from(cfg).unwrap());
    assert!(nss.get("kube-system").await.is_ok());
}

#[tokio::test]
async fn metadata_only_requests_get_partial_object_metadata() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    cms.create(
        &PostParams::default(),
        &cm("a", &[("x", "1")], &[("secret", "data")]),
    )
    .await
    .unwrap();
    let meta = cms.get_metadata("a").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["x"], "1");
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(api.client());
    let mut events = watcher(meta_api, watcher::Config::default())
        .applied_objects()
        .boxed();
    assert_eq!(
        events
            .try_next()
            .await
            .unwrap()
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("a")
    );
}

#[tokio::test]
async fn watch_send_initial_events_streams_the_list_and_ends_it_with_a_bookmark() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(api.client());
    for n in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(n, &[], &[]))
            .await
            .unwrap();
    }
    let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut names = Vec::new();
    loop {
        match events.try_next().await.unwrap().unwrap() {
            watcher::Event::InitApply(c) => names.push(c.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, ["a", "b", "c"]);
    let log = api.request_log();
    assert!(
        log.iter()
            .any(|r| r.verb == "watch" && r.query.contains("sendInitialEvents=true"))
    );
    assert!(
        !log.iter().any(|r| r.verb == "list"),
        "a streaming list needs no list request"
    );
}

mod controller {
    use super::*;
    use kube::runtime::Controller;
    use kube::runtime::controller::Action;
    use kube::{Resource, ResourceExt};

    #[derive(Debug, thiserror::Error)]
    #[error(transparent)]
    struct Error(#[from] kube::Error);

    async fn reconcile(c: Arc<ConfigMap>, client: Arc<kube::Client>) -> Result<Action, Error> {
        let secrets: Api<Secret> = Api::namespaced((*client).clone(), &c.namespace().unwrap());
        let owner = c.controller_owner_ref(&()).unwrap();
        let s: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": c.name_any(), "ownerReferences": [owner]},
            "stringData": {"copy": c.data.clone().unwrap_or_default().get("k").cloned().unwrap_or_default()},
        }))
        .unwrap();
        secrets
            .patch(
                &c.name_any(),
                &PatchParams::apply("copier").force(),
                &Patch::Apply(s),
            )
            .await?;
        Ok(Action::await_change())
    }

    #[tokio::test]
    async fn controller_converges_and_makes_no_writes_at_steady_state() {
        let api = TestApi::start().await;
        let client = api.client();
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let secrets: Api<Secret> = Api::default_namespaced(client.clone());
        let ctl = Controller::new(cms.clone(), watcher::Config::default())
            .owns(secrets.clone(), watcher::Config::default())
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_secs(60)),
                Arc::new(client.clone()),
            )
            .for_each(|_| async {});
        let handle = tokio::spawn(ctl);
        let mut seen = watcher(secrets.clone(), watcher::Config::default())
            .applied_objects()
            .boxed();
        cms.create(&PostParams::default(), &cm("a", &[], &[("k", "v")]))
            .await
            .unwrap();
        let s = seen.try_next().await.unwrap().unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("a"));
        // The controller's own write echoes back through its owns() watch; it
        // reconciles once more and the apply is a no-op that stores nothing.
        let rv = api.resource_version();
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touch": "1"}}})),
        )
        .await
        .unwrap();
        api.clear_request_log();
        // The label change triggers one reconcile whose apply changes nothing.
        let mut n = 0;
        while !api.request_log().iter().any(|r| r.verb == "apply") {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            n += 1;
            assert!(n < 2000, "the controller never reconciled");
        }
        assert_eq!(
            api.resource_version(),
            rv + 1,
            "only the test's own label patch was stored"
        );
        cms.delete("a", &DeleteParams::default()).await.unwrap();
        assert!(
            secrets.get_opt("a").await.unwrap().is_none(),
            "the owned secret is garbage collected"
        );
        handle.abort();
    }
}

/// Garbage collection by owner reference: `Orphan` strips the reference and
/// keeps the dependent; `Foreground` and `Background` delete it.
#[tokio::test]
async fn deletion_propagation_orphans_or_deletes_dependents() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "default");
    let pp = PostParams::default();
    for (policy, dependent_survives) in [
        (DeleteParams::orphan(), true),
        (DeleteParams::foreground(), false),
        (DeleteParams::background(), false),
    ] {
        let owner = cms.create(&pp, &cm("owner", &[], &[])).await.unwrap();
        let mut dependent = cm("dependent", &[], &[]);
        dependent.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.metadata.uid.clone().unwrap()}),
            )
            .unwrap(),
        ]);
        cms.create(&pp, &dependent).await.unwrap();
        cms.delete("owner", &policy).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let owner_gone = cms.get_opt("owner").await.unwrap().is_none();
            let left = cms.get_opt("dependent").await.unwrap();
            if owner_gone && left.is_some() == dependent_survives {
                if let Some(left) = left {
                    assert!(
                        left.metadata
                            .owner_references
                            .unwrap_or_default()
                            .is_empty(),
                        "an orphan loses its owner reference"
                    );
                    cms.delete("dependent", &DeleteParams::default())
                        .await
                        .unwrap();
                }
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}: owner gone {owner_gone}, dependent left {}",
                policy.propagation_policy,
                left.is_some()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Writes a real API server rejects, and so memkube does: each once slipped
/// through memkube and failed only against a real server.
#[tokio::test]
async fn label_values_with_a_slash_are_422_on_create_and_apply() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "default");
    let bad = cm(
        "bad",
        &[(
            "endpointslice.kubernetes.io/managed-by",
            "hcp-ingress.dev/controller",
        )],
        &[],
    );
    let err = cms.create(&PostParams::default(), &bad).await.unwrap_err();
    assert_eq!(reason(&err), "Invalid");
    assert!(
        err.to_string()
            .contains("metadata.labels: Invalid value: \"hcp-ingress.dev/controller\""),
        "{err}"
    );
    assert_eq!(code(err), 422);
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bad", "labels": {"ok": "x", "bad key/x/y": "v"}}});
    let err = cms
        .patch("bad", &PatchParams::apply("t"), &Patch::Apply(&applied))
        .await
        .unwrap_err();
    assert_eq!(code(err), 422);
    let good = cm(
        "good",
        &[(
            "endpointslice.kubernetes.io/managed-by",
            "controller.hcp-ingress.dev",
        )],
        &[],
    );
    cms.create(&PostParams::default(), &good).await.unwrap();
    let long = "v".repeat(64);
    let err = cms
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": long}}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("must be no more than 63 characters"),
        "{err}"
    );
}

#[tokio::test]
async fn annotation_keys_must_be_qualified_names() {
    let api = TestApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "default");
    let mut bad = cm("a", &[], &[]);
    bad.metadata.annotations = Some(BTreeMap::from([("not a key".to_string(), "v".to_string())]));
    assert_eq!(
        code(cms.create(&PostParams::default(), &bad).await.unwrap_err()),
        422
    );
}

#[tokio::test]
async fn an_event_note_over_1024_bytes_or_a_reason_over_128_is_422() {
    let api = TestApi::start().await;
    let events: Api<DynamicObject> = Api::namespaced_with(
        api.client(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    let event = |name: &str, note: String, reason: String| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "test", "reportingInstance": "test", "action": "Test",
            "reason": reason, "note": note, "type": "Normal",
            "regarding": {"kind": "ConfigMap", "name": "x", "namespace": "default"}}))
        .unwrap()
    };
    let err = events
        .create(
            &PostParams::default(),
            &event("long", "n".repeat(1025), "R".into()),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("can have at most 1024 characters"),
        "{err}"
    );
    assert_eq!(code(err), 422);
    // Bytes, not characters: 512 two-byte characters are 1024 bytes.
    events
        .create(
            &PostParams::default(),
            &event("fits", "é".repeat(512), "R".into()),
        )
        .await
        .unwrap();
    let err = events
        .create(
            &PostParams::default(),
            &event("reason", "n".into(), "R".repeat(129)),
        )
        .await
        .unwrap_err();
    assert_eq!(code(err), 422);
}

#[tokio::test]
async fn a_tls_secret_needs_tls_crt_and_tls_key() {
    let api = TestApi::start().await;
    let secrets: Api<Secret> = Api::namespaced(api.client(), "default");
    let secret = |data: Value| -> Secret {
        serde_json::from_value(
            json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "stringData": data}),
        )
        .unwrap()
    };
    let err = secrets
        .create(&PostParams::default(), &secret(json!({"tls.crt": "c"})))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("data[tls.key]: Required value"),
        "{err}"
    );
    secrets
        .create(
            &PostParams::default(),
            &secret(json!({"tls.crt": "c", "tls.key": "k"})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_list_of_a_built_in_kind_has_items_without_api_version_and_kind() {
    let api = TestApi::start().await;
    let client = api.client();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    let text = client
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"][0]["metadata"]["name"], "a");
    assert!(
        list["items"][0].get("kind").is_none() && list["items"][0].get("apiVersion").is_none(),
        "{list}"
    );
}
