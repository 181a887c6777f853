//! A workload cluster as `observe` would see it, from a few plain knobs:
//! the facts the table tests and the property tests hand to `decide`.

use k8s_openapi::api::{
    core::v1::{Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::{Given, RemovalFacts};
use crate::{
    api::{ControlPlaneIngress, Steering},
    controller::{
        apply,
        status::{Desired, Status},
        workload::{
            ccm::CcmFacts,
            observe::{AsRead, Credentials, Facts, LiveProxy, reads_controller_slices, rollout},
            plan::{Plan, Step},
        },
    },
    render::workload::{self, ProxyObjects, ProxyTls, SteeringRecord, WorkloadInputs},
};

/// `now` in the fixtures, in Unix seconds.
pub(super) const NOW: i64 = 1_800_000_000;

/// Our proxy's DaemonSet in the namespace of the spec's mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ProxyAt {
    /// Not created yet.
    Absent,
    /// Current template, `ready` of `desired` nodes ready and updated.
    Rolling { desired: i32, ready: i32 },
    /// Current template, ready and updated on all of `nodes`.
    RolledOut { nodes: i32 },
    /// Rolled out, but with a template this pass rewrites.
    Stale { nodes: i32 },
}

/// Service `default/kubernetes`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ServiceAt {
    /// As the API server keeps it: no selector, `internalTrafficPolicy: Cluster`.
    ApiServer,
    /// Selecting the proxy pods, policy untouched (service hand-over under way).
    Handover,
    /// Service steering: selects the proxy pods, `Local`.
    Steered,
    /// A provider's node proxy steers it (k0s stack label, its selector, `Local`).
    Provider,
}

/// A workload cluster and a ControlPlaneIngress for it.
#[derive(Clone, Debug)]
pub(super) struct World {
    /// `spec.proxy.steering`.
    pub steering: Steering,
    /// `spec.upstream.takeOverNodeProxy` (k0smotron's proxy).
    pub take_over: bool,
    /// The stored steering record.
    pub record: Option<SteeringRecord>,
    /// Our proxy's DaemonSet.
    pub proxy: ProxyAt,
    /// Whether a Node exists.
    pub any_node: bool,
    /// The `kubernetes` Service.
    pub service: ServiceAt,
    /// Endpoints and EndpointSlice `default/kubernetes` are ours, as we want
    /// them (else the API server's own).
    pub address_steered: bool,
    /// Ready proxy pods with a node the EndpointSlice controller lists.
    pub listed: i32,
    /// The provider's proxy: desired and ready pods, while deployed.
    pub provider_proxy: Option<(i32, i32)>,
    /// A rewrite seen in a recent pass.
    pub recent_drift: Vec<String>,
}

impl World {
    /// A cluster with one node, our proxy absent, nothing steered yet.
    pub(super) fn new(steering: Steering) -> World {
        World {
            steering,
            take_over: false,
            record: None,
            proxy: ProxyAt::Absent,
            any_node: true,
            service: ServiceAt::ApiServer,
            address_steered: false,
            listed: 0,
            provider_proxy: None,
            recent_drift: Vec::new(),
        }
    }

    /// The ControlPlaneIngress.
    pub(super) fn cpi(&self) -> ControlPlaneIngress {
        let steering = match self.steering {
            Steering::AdvertiseAddress => "advertise-address",
            Steering::Service => "service",
        };
        let mut spec = json!({
            "clusterName": "tenant-01",
            "ingress": {"apiHost": "api.tenant-01.example.com", "port": 8443},
            "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443},
            "proxy": {"steering": steering},
        });
        if self.take_over {
            spec["upstream"] = json!({
                "provider": "k0smotron",
                "nodeProxy": {"kind": "DaemonSet", "namespace": "kube-system", "name": "k0smotron-haproxy"},
                "takeOverNodeProxy": true,
            });
        }
        serde_json::from_value(json!({
            "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": "tenant-01", "namespace": "tenants", "generation": 1},
            "spec": spec,
        }))
        .expect("a valid ControlPlaneIngress")
    }

    /// What `decide` is given besides the facts.
    pub(super) fn given<'a>(&self, cpi: &'a ControlPlaneIngress) -> Given<'a> {
        Given {
            cpi,
            base: base(),
            retry: std::time::Duration::from_secs(30),
            now: NOW,
        }
    }

    /// The facts `observe` would read.
    pub(super) fn facts(&self) -> Facts {
        let cpi = self.cpi();
        let service = service(self.service);
        let objects = wanted(&cpi, &service);
        let (endpoints, endpoint_slice) = self.default_endpoints(&objects);
        let proxy = live_proxy(&objects, self.proxy);
        // As observe reads it: a DaemonSet rolled out proves a Node.
        let any_node = self.any_node || rollout(proxy.daemon_set.as_ref()).2;
        let as_read = AsRead {
            service: Some(dynamic(&service, "Service")),
            endpoints: endpoints.as_ref().map(|e| dynamic(e, "Endpoints")),
            endpoint_slice: endpoint_slice.as_ref().map(|s| dynamic(s, "EndpointSlice")),
        };
        // As observe reads them: not in a steady pass.
        let controller_slices = if reads_controller_slices(
            self.record.as_ref(),
            self.steering,
            self.take_over,
            Some(&service),
        ) {
            controller_slices(self.listed)
        } else {
            Vec::new()
        };
        Facts {
            service: Some(service),
            endpoints,
            endpoint_slice,
            as_read,
            controller_slices,
            record: self.record.clone(),
            proxy,
            any_node,
            provider_proxy: self.provider_proxy.filter(|_| self.take_over),
            ccm: CcmFacts::default(),
            published: Vec::new(),
            credentials: Ok(credentials()),
            recent_drift: self.recent_drift.clone(),
        }
    }

    fn default_endpoints(
        &self,
        objects: &ProxyObjects,
    ) -> (Option<Endpoints>, Option<EndpointSlice>) {
        if !self.address_steered {
            return (Some(api_server_endpoints()), None);
        }
        // Ours as a previous pass applied them, whatever the mode now.
        let cpi = World {
            steering: Steering::AdvertiseAddress,
            ..self.clone()
        }
        .cpi();
        let ours = if matches!(
            objects.steering,
            workload::SteeringObjects::AdvertiseAddress { .. }
        ) {
            objects.clone()
        } else {
            wanted(&cpi, &service(self.service))
        };
        let workload::SteeringObjects::AdvertiseAddress {
            endpoints,
            endpoint_slice,
        } = ours.steering
        else {
            unreachable!("address steering renders Endpoints");
        };
        (
            Some(typed(&applied(&dynamic(endpoints.as_ref(), "Endpoints")))),
            Some(typed(&applied(&dynamic(
                endpoint_slice.as_ref(),
                "EndpointSlice",
            )))),
        )
    }

    /// What a removal would read in this world; `finish_anyway` is the
    /// user's opt-in, `selector_ready` whether a recorded provider selector
    /// still selects a Ready pod.
    pub(super) fn removal_facts(&self, finish_anyway: bool, selector_ready: bool) -> RemovalFacts {
        let facts = self.facts();
        let cpi = self.cpi();
        let ours = |kind: &str, namespace: &str, name: &str| {
            let mut object = DynamicObject {
                types: Some(kube::api::TypeMeta {
                    api_version: "v1".into(),
                    kind: kind.into(),
                }),
                metadata: Default::default(),
                data: json!({}),
            };
            object.metadata.namespace = Some(namespace.into());
            object.metadata.name = Some(name.into());
            object.metadata.uid = Some(format!("uid-{kind}-{namespace}-{name}"));
            object.metadata.labels = Some(
                [(
                    crate::api::MANAGED_BY_LABEL.to_string(),
                    crate::api::MANAGER.to_string(),
                )]
                .into(),
            );
            object
        };
        // Both modes' proxies while ours is there (a switch may have left one).
        let proxy_objects = if self.proxy == ProxyAt::Absent {
            Vec::new()
        } else {
            [Steering::AdvertiseAddress, Steering::Service]
                .into_iter()
                .flat_map(|mode| {
                    let namespace = workload::proxy_namespace(mode);
                    ["DaemonSet", "Secret", "ConfigMap"]
                        .map(|kind| ours(kind, namespace, workload::NAME))
                })
                .collect()
        };
        RemovalFacts {
            endpoints: facts.endpoints.clone(),
            endpoints_object: facts.as_read.endpoints.clone(),
            record: self.record.clone(),
            record_object: self
                .record
                .as_ref()
                .map(|_| ours("ConfigMap", workload::NAMESPACE, workload::RECORD_NAME)),
            advertise_address: workload::advertise_address(
                &workload::proxy_spec(&cpi),
                workload::service_ip(facts.service.as_ref()),
            ),
            finish_anyway,
            service_steered: matches!(self.service, ServiceAt::Handover | ServiceAt::Steered),
            recorded_selector_ready: Some(selector_ready),
            our_slice: facts.as_read.endpoint_slice.clone(),
            controller_slices: facts
                .controller_slices
                .iter()
                .map(|s| dynamic(s, "EndpointSlice"))
                .collect(),
            patched: Vec::new(),
            published: Vec::new(),
            proxy_objects,
            now: NOW,
        }
    }

    /// Decide on this world.
    pub(super) fn decide(&self) -> Plan {
        let cpi = self.cpi();
        super::decide(&self.given(&cpi), &self.facts()).expect("a plan")
    }
}

fn base() -> WorkloadInputs {
    WorkloadInputs {
        image: "registry.example/hcp-ingress-proxy:test".into(),
        cluster_domain: workload::DEFAULT_CLUSTER_DOMAIN.into(),
        ..WorkloadInputs::default()
    }
}

fn credentials() -> Credentials {
    Credentials {
        ca_cert_pem: "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n".into(),
        tls: Some(ProxyTls {
            cert_pem: "CERT".into(),
            key_pem: "KEY".into(),
        }),
        renew_in: None,
    }
}

/// The objects `decide` renders for `cpi` in a cluster with `service`.
pub(super) fn wanted(cpi: &ControlPlaneIngress, service: &Service) -> ProxyObjects {
    let spec = workload::proxy_spec(cpi);
    let mut inputs = workload::inputs_from_service(spec.steering, Some(service), base());
    let credentials = credentials();
    inputs.ca_cert_pem = Some(credentials.ca_cert_pem);
    inputs.tls = credentials.tls;
    workload::proxy(cpi, &inputs)
        .expect("renders")
        .expect("enabled")
}

fn dynamic<T: serde::Serialize>(object: &T, kind: &'static str) -> DynamicObject {
    workload::dynamic(object, kind).expect("serializes")
}

fn typed<T: serde::de::DeserializeOwned>(object: &DynamicObject) -> T {
    serde_json::from_value(serde_json::to_value(object).expect("serializes")).expect("typed")
}

/// `object` as our apply leaves it: with the digest of what was applied.
fn applied(object: &DynamicObject) -> DynamicObject {
    let mut live = object.clone();
    live.metadata.annotations.get_or_insert_default().insert(
        apply::APPLIED_DIGEST_ANNOTATION.into(),
        apply::digest(object),
    );
    live
}

fn live_proxy(objects: &ProxyObjects, at: ProxyAt) -> LiveProxy {
    let proxy = objects.proxy_to_dynamic().expect("serializes");
    let find = |kind: &str| {
        proxy
            .iter()
            .find(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
    };
    let (desired, ready, stale) = match at {
        ProxyAt::Absent => return LiveProxy::default(),
        ProxyAt::Rolling { desired, ready } => (desired, ready, false),
        ProxyAt::RolledOut { nodes } => (nodes, nodes, false),
        ProxyAt::Stale { nodes } => (nodes, nodes, true),
    };
    let mut daemon_set = applied(find("DaemonSet").expect("a DaemonSet"));
    if stale {
        daemon_set.metadata.annotations = None;
    }
    daemon_set.metadata.generation = Some(2);
    daemon_set.data["status"] = json!({
        "observedGeneration": 2, "desiredNumberScheduled": desired, "numberReady": ready,
        "updatedNumberScheduled": ready, "currentNumberScheduled": desired, "numberMisscheduled": 0,
    });
    LiveProxy {
        config_map: find("ConfigMap").map(applied),
        secret: find("Secret").map(applied),
        daemon_set: Some(daemon_set),
    }
}

/// Service `default/kubernetes` in one of its states.
pub(super) fn service(at: ServiceAt) -> Service {
    let proxy = serde_json::to_value(workload::selector_labels()).expect("labels");
    let (labels, selector, policy) = match at {
        ServiceAt::ApiServer => (json!({}), Value::Null, json!("Cluster")),
        ServiceAt::Handover => (json!({}), proxy, json!("Cluster")),
        ServiceAt::Steered => (json!({}), proxy, json!("Local")),
        ServiceAt::Provider => (
            json!({workload::K0S_STACK_LABEL: "k0smotron"}),
            json!({"app": "k0smotron-haproxy"}),
            json!("Local"),
        ),
    };
    let publish = matches!(at, ServiceAt::Handover | ServiceAt::Steered);
    serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels,
                     "resourceVersion": "7"},
        "spec": {
            "clusterIP": "10.96.0.1", "selector": selector, "internalTrafficPolicy": policy,
            "publishNotReadyAddresses": publish,
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
        },
    }))
    .expect("a Service")
}

/// The record made before the first steering write of a cluster whose API
/// server keeps `default/kubernetes` (no selector, its own address).
pub(super) fn api_server_record() -> SteeringRecord {
    workload::record(
        Some(&service(ServiceAt::ApiServer)),
        Some(&api_server_endpoints()),
        None,
    )
}

fn api_server_endpoints() -> Endpoints {
    serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "192.0.2.10"}],
                     "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}],
    }))
    .expect("Endpoints")
}

/// The EndpointSlice controller's slice of the Service, listing `ready`
/// proxy pods with a node each.
fn controller_slices(ready: i32) -> Vec<EndpointSlice> {
    if ready == 0 {
        return Vec::new();
    }
    let endpoints: Vec<Value> = (0..ready)
        .map(|i| {
            json!({"addresses": [format!("10.244.{i}.5")], "nodeName": format!("node-{i}"),
                   "conditions": {"ready": true}})
        })
        .collect();
    vec![
        serde_json::from_value(json!({
            "metadata": {"name": "kubernetes-abcde", "namespace": "default", "uid": "slice-uid",
                         "labels": {"kubernetes.io/service-name": "kubernetes",
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }))
        .expect("an EndpointSlice"),
    ]
}

/// The condition of `type_` in a plan: status and reason.
pub(super) fn condition(plan: &Plan, type_: &str) -> Option<(Status, String)> {
    plan.conditions
        .iter()
        .rev()
        .find(|c: &&Desired| c.type_ == type_)
        .map(|c| (c.status, c.reason.clone()))
}

/// The record the plan leaves stored (the facts' when it stores none).
pub(super) fn final_record(plan: &Plan, facts: &Facts) -> Option<SteeringRecord> {
    plan.records()
        .last()
        .cloned()
        .or_else(|| facts.record.clone())
}

/// The kind and name of each write, in order, for reading in a failed assertion.
pub(super) fn describe(plan: &Plan) -> Vec<String> {
    plan.steps()
        .map(|step| match step {
            Step::Record(r) => format!("Record(applied {:?}, leaving {:?})", r.applied, r.leaving),
            Step::Apply { object, .. } => format!("Apply {}", name(object)),
            Step::ApplyFields { object, .. } => format!("ApplyFields {}", name(object)),
            Step::Force(object) => format!("Force {}", name(object)),
            Step::PatchService(patch) => format!("PatchService {patch}"),
            Step::Delete(object) => format!("Delete {}", name(object)),
            Step::RemoveProxy(mode) => format!("RemoveProxy {mode:?}"),
            Step::AwaitOtherSlice => "AwaitOtherSlice".to_string(),
        })
        .collect()
}

/// `Kind namespace/name`.
pub(super) fn name(object: &DynamicObject) -> String {
    format!(
        "{} {}/{}",
        object.types.as_ref().map_or("", |t| t.kind.as_str()),
        object.metadata.namespace.as_deref().unwrap_or(""),
        object.metadata.name.as_deref().unwrap_or("")
    )
}
