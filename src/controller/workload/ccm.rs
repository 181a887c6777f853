//! The cloud-controller-manager and konnectivity-agent of a workload
//! cluster: pointed at the ingress host by name (`KUBERNETES_SERVICE_HOST/PORT`,
//! `--proxy-server-host/port`), and given back on removal.

use std::collections::HashMap;

use kube::{Api, Client, ResourceExt, api::DynamicObject};

use super::{
    error::{WorkloadError, api_error},
    plan::Step,
};
use crate::{
    api::ControlPlaneIngress,
    controller::status::{Desired, types},
    render::workload::{self as ccm, OverrideTarget},
};

/// The CCM workloads `cpi` targets that exist in the workload cluster (with
/// the live object), and the named targets that do not (well-known names are
/// only looked for). On failure: what was being read, and the error.
pub(crate) async fn find_ccm_workloads(
    client: &Client,
    cpi: &ControlPlaneIngress,
) -> Result<(Vec<(OverrideTarget, DynamicObject)>, Vec<String>), (String, kube::Error)> {
    let targets = ccm::ccm_targets(cpi);
    let mut found: Vec<(OverrideTarget, DynamicObject)> = Vec::new();
    let mut missing = Vec::new();
    if targets.is_empty() {
        return Ok((found, missing));
    }
    // The well-known names are looked up as both kinds: one list per kind
    // answers them all, where a get per name and kind would cost dozens.
    let mut listed: HashMap<ccm::WorkloadKind, Vec<DynamicObject>> = HashMap::new();
    for target in targets {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &target.namespace,
            &target.kind.api_resource(),
        );
        let live = if target.well_known {
            let all = match listed.entry(target.kind) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let items = api
                        .list(&Default::default())
                        .await
                        .map_err(|err| {
                            (
                                format!("list {}s in {}", target.kind.as_str(), target.namespace),
                                err,
                            )
                        })?
                        .items;
                    e.insert(items)
                }
            };
            all.iter().find(|o| o.name_any() == target.name).cloned()
        } else {
            api.get_opt(&target.name)
                .await
                .map_err(|e| (format!("read {}", describe(&target)), e))?
        };
        match live {
            Some(live) => found.push((target, live)),
            None if !target.well_known => missing.push(describe(&target)),
            None => {}
        }
    }
    // Selected by label: every Deployment and DaemonSet in kube-system that carries them.
    let selector = cpi.spec.ccm.clone().unwrap_or_default().selector;
    if !selector.is_empty() {
        let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let params = kube::api::ListParams::default().labels(&labels.join(","));
        for kind in [ccm::WorkloadKind::Deployment, ccm::WorkloadKind::DaemonSet] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ccm::CCM_NAMESPACE, &kind.api_resource());
            let list = api.list(&params).await.map_err(|e| {
                (
                    format!("list {}s selected by spec.ccm.selector", kind.as_str()),
                    e,
                )
            })?;
            for live in list {
                if found
                    .iter()
                    .any(|(t, _)| t.kind == kind && t.name == live.name_any())
                {
                    continue;
                }
                let target = OverrideTarget {
                    kind,
                    namespace: ccm::CCM_NAMESPACE.to_string(),
                    name: live.name_any(),
                    containers: Vec::new(),
                    well_known: false,
                };
                found.push((target, live));
            }
        }
    }
    Ok((found, missing))
}

/// The CCM and konnectivity-agent workloads `spec.ccm` targets, as they are.
#[derive(Clone, Debug, Default)]
pub(super) struct CcmFacts {
    /// The targets that exist, with the live object.
    pub found: Vec<(OverrideTarget, DynamicObject)>,
    /// The named targets that do not.
    pub missing: Vec<String>,
    /// With `spec.ccm.konnectivityAgent` and a konnectivity host:
    /// Deployment `kube-system/konnectivity-agent`, when it exists.
    pub konnectivity_agent: Option<DynamicObject>,
}

/// Read the workloads `cpi`'s CCM override targets.
pub(super) async fn observe(
    client: &Client,
    cpi: &ControlPlaneIngress,
) -> Result<CcmFacts, WorkloadError> {
    if ccm::ccm_targets(cpi).is_empty() {
        return Ok(CcmFacts::default());
    }
    let (found, missing) = find_ccm_workloads(client, cpi)
        .await
        .map_err(|(what, e)| api_error(&what, e))?;
    let spec = cpi.spec.ccm.clone().unwrap_or_default();
    let mut konnectivity_agent = None;
    if spec.konnectivity_agent && ccm::konnectivity_server(cpi).is_some() {
        let agent = ccm::KONNECTIVITY_AGENT;
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            ccm::CCM_NAMESPACE,
            &agent.kind.api_resource(),
        );
        konnectivity_agent = api.get_opt(agent.name).await.map_err(|e| {
            api_error(
                &format!(
                    "read {} {}/{}",
                    agent.kind.as_str(),
                    ccm::CCM_NAMESPACE,
                    agent.name
                ),
                e,
            )
        })?;
    }
    Ok(CcmFacts {
        found,
        missing,
        konnectivity_agent,
    })
}

/// Set `KUBERNETES_SERVICE_HOST/PORT` on each CCM target found (and point
/// konnectivity-agent at the ingress): the writes, and CCMConfigured.
pub(super) fn plan(cpi: &ControlPlaneIngress, facts: &CcmFacts) -> (Vec<Step>, Desired) {
    if ccm::ccm_targets(cpi).is_empty() {
        let off = Desired::ok(
            types::CCM_CONFIGURED,
            "Disabled",
            "spec.ccm.enabled is false",
        );
        return (Vec::new(), off);
    }
    let spec = cpi.spec.ccm.clone().unwrap_or_default();
    let mut missing = facts.missing.clone();
    let mut steps = Vec::new();
    let mut patched = Vec::new();
    let mut left = Vec::new();
    for (target, live) in &facts.found {
        let containers = if target.containers.is_empty() {
            container_names(live)
        } else {
            target.containers.clone()
        };
        let (theirs, containers): (Vec<String>, Vec<String>) = containers
            .into_iter()
            .partition(|c| ccm::foreign_service_host(live, c).is_some());
        for container in &theirs {
            let value = ccm::foreign_service_host(live, container).unwrap_or_default();
            left.push(format!(
                "{} container {container} (KUBERNETES_SERVICE_HOST={value} is set by another manager)",
                describe(target)
            ));
        }
        if containers.is_empty() {
            continue;
        }
        let object = ccm::ccm_patch(
            cpi,
            target.kind,
            &target.namespace,
            &target.name,
            &containers,
        );
        steps.push(Step::ApplyFields {
            object,
            live: Some(live.clone()),
        });
        patched.push(format!(
            "{} (containers: {})",
            describe(target),
            containers.join(", ")
        ));
    }
    if spec.konnectivity_agent {
        match konnectivity_agent(cpi, facts.konnectivity_agent.as_ref()) {
            AgentOverride::Patch { step, done } => {
                steps.push(*step);
                patched.push(done);
            }
            AgentOverride::Missing(what) => missing.push(what),
        }
    }
    (steps, configured(cpi, &missing, &patched, &left))
}

/// CCMConfigured, from what is patched, left to others and missing.
fn configured(
    cpi: &ControlPlaneIngress,
    missing: &[String],
    patched: &[String],
    left: &[String],
) -> Desired {
    let [(_, host), (_, port)] = ccm::service_host_env(cpi);
    let set = format!("KUBERNETES_SERVICE_HOST={host} KUBERNETES_SERVICE_PORT={port}");
    if !missing.is_empty() {
        Desired::failed(
            types::CCM_CONFIGURED,
            "TargetNotFound",
            format!("not found: {}", missing.join(", ")),
        )
    } else if patched.is_empty() && !left.is_empty() {
        Desired::ok(
            types::CCM_CONFIGURED,
            "SetByOthers",
            format!("left as they are: {}", left.join(", ")),
        )
    } else if patched.is_empty() {
        Desired::ok(
            types::CCM_CONFIGURED,
            "NoCCMFound",
            "no well-known cloud-controller-manager runs in kube-system",
        )
    } else if !left.is_empty() {
        Desired::ok(
            types::CCM_CONFIGURED,
            "Patched",
            format!(
                "{set} on {}; left as they are: {}",
                patched.join(", "),
                left.join(", ")
            ),
        )
    } else {
        Desired::ok(
            types::CCM_CONFIGURED,
            "Patched",
            format!("{set} on {}", patched.join(", ")),
        )
    }
}

/// What pointing konnectivity-agent at the ingress comes to.
enum AgentOverride {
    /// The write, and what it does in words.
    Patch { step: Box<Step>, done: String },
    /// What is missing for it, in words.
    Missing(String),
}

/// Point konnectivity-agent at `ingress.konnectivityHost:port`
/// (`--proxy-server-host/port`).
fn konnectivity_agent(cpi: &ControlPlaneIngress, live: Option<&DynamicObject>) -> AgentOverride {
    let agent = ccm::KONNECTIVITY_AGENT;
    let Some((host, port)) = ccm::konnectivity_server(cpi) else {
        return AgentOverride::Missing(
            "spec.ccm.konnectivityAgent needs spec.ingress.konnectivityHost".into(),
        );
    };
    let what = format!(
        "{} {}/{}",
        agent.kind.as_str(),
        ccm::CCM_NAMESPACE,
        agent.name
    );
    let Some(live) = live else {
        return AgentOverride::Missing(what);
    };
    let Some(container) = live.data.pointer("/spec/template/spec/containers/0") else {
        return AgentOverride::Missing(format!("{what} has no container"));
    };
    let name = container["name"].as_str().unwrap_or_default().to_string();
    let current: Vec<String> = container["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let args = ccm::konnectivity_agent_args(&current, &host, port);
    let original = ccm::original_args(live, &current);
    // `args` is an atomic list: we apply the whole list, the other flags kept as they were.
    let object = ccm::konnectivity_agent_patch(
        agent.kind,
        ccm::CCM_NAMESPACE,
        agent.name,
        &name,
        &args,
        &original,
    );
    let step = Step::ApplyFields {
        object,
        live: Some(live.clone()),
    };
    AgentOverride::Patch {
        step: Box::new(step),
        done: format!("{what} (--proxy-server-host={host} --proxy-server-port={port})"),
    }
}

fn describe(target: &OverrideTarget) -> String {
    format!(
        "{} {}/{}",
        target.kind.as_str(),
        target.namespace,
        target.name
    )
}

fn container_names(workload: &DynamicObject) -> Vec<String> {
    workload
        .data
        .pointer("/spec/template/spec/containers")
        .and_then(|c| c.as_array())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
