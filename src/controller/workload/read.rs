//! Reads of the workload cluster whose objects a step can act on: each
//! object with its kind set (a list leaves it out of its items, and a
//! delete step finds its API by it).

use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams},
};

use super::error::{WorkloadError, api_error};

/// The namespaced API of kind `K`, and the kind's resource.
fn api<K>(client: &Client, namespace: &str) -> (Api<DynamicObject>, ApiResource)
where
    K: kube::Resource<DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    let api = Api::namespaced_with(client.clone(), namespace, &resource);
    (api, resource)
}

/// One object of kind `K`, as read, with its kind set.
pub(super) async fn get<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, WorkloadError> {
    let (api, resource) = api::<K>(client, namespace);
    let what = format!("read {} {namespace}/{name}", resource.kind);
    let object = api.get_opt(name).await.map_err(|e| api_error(&what, e))?;
    Ok(object.map(|o| with_kind(o, &resource)))
}

/// The objects of kind `K` matching `labels`, each with its kind set.
pub(super) async fn list<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    namespace: &str,
    labels: &str,
) -> Result<Vec<DynamicObject>, WorkloadError> {
    let (api, resource) = api::<K>(client, namespace);
    let what = format!("list {}s {labels} in {namespace}", resource.kind);
    let params = ListParams::default().labels(labels);
    let list = api.list(&params).await.map_err(|e| api_error(&what, e))?;
    let objects = list.items.into_iter().map(|o| with_kind(o, &resource));
    Ok(objects.collect())
}

fn with_kind(mut object: DynamicObject, resource: &ApiResource) -> DynamicObject {
    object.types = Some(kube::api::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    object
}

pub(super) fn typed<K: serde::de::DeserializeOwned>(
    object: &DynamicObject,
) -> Result<K, WorkloadError> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            WorkloadError::Api(format!(
                "failed to read {} in the workload cluster: {e}",
                object.name_any()
            ))
        })
}
