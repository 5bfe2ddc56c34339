//! What the scheduler reads from API objects, as small plain values: a
//! node's GPUs, domains and health; a pod's gang, GPU count, binding and
//! phase; a PodGroup's `minMember`. Everything here is a pure function of
//! one object, so it is tested without a cluster.

use std::collections::BTreeMap;

use gangway_core::Health;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use super::GangProblem;
use super::podgroup::PodGroup;

/// The label that puts a pod in a PodGroup (scheduler-plugins' Coscheduling).
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Annotation a pod may carry to ask for GPUs (HiveD-style: exact indices
/// through `NVIDIA_VISIBLE_DEVICES`, no device-plugin allocation); wins over
/// the GPU resource.
pub const GPUS_ANNOTATION: &str = "gangway.io/gpus";
/// Annotation Gangway puts on the Binding (copied onto the pod): the GPU
/// indices of the pod on its node, `0,1,2,3`.
pub const GPU_INDICES_ANNOTATION: &str = "gangway.io/gpu-indices";
/// Annotation on the Binding: the whole gang's plan, every pod's node and
/// GPU indices (`pod=node:0,1;pod2=node2:4,5`), so that a restarted
/// scheduler can finish binding a gang it had begun.
pub const GANG_PLAN_ANNOTATION: &str = "gangway.io/gang-plan";
/// Annotation on the Binding: which gang and attempt (`ns/name#attempt`).
pub const GANG_ANNOTATION: &str = "gangway.io/gang";

/// A node as Gangway sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its name.
    pub name: String,
    /// GPUs it has (allocatable).
    pub gpus: u32,
    /// The domain at each configured level (label value, `(none)` without).
    pub domains: Vec<String>,
    /// Up, draining (unschedulable) or down (not Ready).
    pub health: Health,
}

/// Where a pod is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not running yet (bound or not).
    Pending,
    /// Running.
    Running,
    /// Ended well.
    Succeeded,
    /// Ended badly.
    Failed,
}

impl Phase {
    /// Succeeded or failed: its GPUs are free.
    pub fn ended(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// A pod as Gangway sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Whether `spec.schedulerName` is ours.
    pub ours: bool,
    /// The node it is bound to.
    pub node: Option<String>,
    /// Its phase.
    pub phase: Phase,
    /// Being deleted (deletionTimestamp set).
    pub terminating: bool,
    /// GPUs it asks for, or what is wrong with the request.
    pub gpus: Result<u32, GangProblem>,
    /// Its PodGroup (the label), if any.
    pub group: Option<String>,
    /// The value of the VC label, if configured and present.
    pub vc_label: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_ms: u64,
    /// GPU indices Gangway bound it with (its annotation).
    pub gpu_indices: Option<Vec<u32>>,
    /// The gang plan Gangway bound it with (its annotation).
    pub plan: Option<String>,
}

impl PodInfo {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Holds GPUs on a node now: bound, not ended, not being deleted.
    pub fn holds(&self) -> bool {
        self.node.is_some() && !self.phase.ended()
    }
}

/// A PodGroup as Gangway sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// `spec.minMember` (0 when absent).
    pub min_member: i64,
    /// Creation time, Unix milliseconds.
    pub created_ms: u64,
}

/// Unix milliseconds of a Kubernetes time.
fn ms(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> u64 {
    t.map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
}

/// Parses a GPU count: a whole, non-negative number, written plainly
/// (`4`, `+4`); anything else (`-1`, `0.5`, `500m`, `1k`) is refused.
pub fn parse_gpu_count(text: &str) -> Option<u32> {
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// The GPUs a pod asks for: its annotation, else the sum over containers
/// of the resource's limit (or request), plus the largest init container's.
fn pod_gpus(pod: &Pod, resource: &str) -> Result<u32, GangProblem> {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let bad = |resource: &str, value: &str| GangProblem::BadGpuCount {
        pod: key.clone(),
        resource: resource.to_string(),
        value: value.to_string(),
    };
    if let Some(v) = pod.annotations().get(GPUS_ANNOTATION) {
        return parse_gpu_count(v).ok_or_else(|| bad(GPUS_ANNOTATION, v));
    }
    let Some(spec) = &pod.spec else { return Ok(0) };
    let container = |c: &k8s_openapi::api::core::v1::Container| -> Result<u32, GangProblem> {
        let Some(r) = &c.resources else { return Ok(0) };
        let get = |m: &Option<
            BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            m.as_ref()
                .and_then(|m| m.get(resource))
                .map(|q| q.0.clone())
        };
        let (req, lim) = (get(&r.requests), get(&r.limits));
        let parse = |v: &str| parse_gpu_count(v).ok_or_else(|| bad(resource, v));
        match (req, lim) {
            (None, None) => Ok(0),
            (Some(v), None) | (None, Some(v)) => parse(&v),
            (Some(rq), Some(li)) => {
                let (a, b) = (parse(&rq)?, parse(&li)?);
                if a == b {
                    Ok(a)
                } else {
                    Err(GangProblem::RequestLimitDiffer {
                        pod: key.clone(),
                        resource: resource.to_string(),
                        request: a,
                        limit: b,
                    })
                }
            }
        }
    };
    let mut sum = 0u32;
    for c in &spec.containers {
        sum = sum.saturating_add(container(c)?);
    }
    let mut init = 0u32;
    for c in spec.init_containers.iter().flatten() {
        init = init.max(container(c)?);
    }
    Ok(sum.max(init))
}

/// Parses GPU indices written `0,1,5`.
pub fn parse_indices(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        out.push(part.parse().ok()?);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// GPU indices as written on annotations: `0,1,5`.
pub fn indices_text(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A pod as Gangway sees it. `scheduler` is our scheduler name,
/// `resource` the GPU resource, `vc_label` the VC label key ("" for none).
pub fn pod_info(pod: &Pod, scheduler: &str, resource: &str, vc_label: &str) -> PodInfo {
    let spec = pod.spec.as_ref();
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => Phase::Running,
        Some("Succeeded") => Phase::Succeeded,
        Some("Failed") => Phase::Failed,
        _ => Phase::Pending,
    };
    let annotations = pod.annotations();
    PodInfo {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        ours: spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler),
        node: spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        phase,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        gpus: pod_gpus(pod, resource),
        group: pod.labels().get(POD_GROUP_LABEL).cloned(),
        vc_label: (!vc_label.is_empty())
            .then(|| pod.labels().get(vc_label).cloned())
            .flatten(),
        created_ms: ms(pod.metadata.creation_timestamp.as_ref()),
        gpu_indices: annotations
            .get(GPU_INDICES_ANNOTATION)
            .and_then(|t| parse_indices(t)),
        plan: annotations.get(GANG_PLAN_ANNOTATION).cloned(),
    }
}

/// A node as Gangway sees it: GPUs from the resource's allocatable
/// (capacity when absent; nodes without GPUs have 0), domains from the
/// `levels` labels, health from its Ready condition (not Ready: down) and
/// `spec.unschedulable` (draining).
pub fn node_info(node: &Node, resource: &str, levels: &[String]) -> NodeInfo {
    let status = node.status.as_ref();
    let gpus = status
        .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
        .and_then(|m| m.get(resource))
        .and_then(|q| parse_gpu_count(&q.0))
        .unwrap_or(0);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let health = if !ready {
        Health::Down
    } else if unschedulable {
        Health::Draining
    } else {
        Health::Up
    };
    NodeInfo {
        name: node.name_any(),
        gpus,
        domains: levels
            .iter()
            .map(|l| {
                node.labels()
                    .get(l)
                    .cloned()
                    .unwrap_or_else(|| "(none)".into())
            })
            .collect(),
        health,
    }
}

/// A PodGroup as Gangway sees it.
pub fn group_info(pg: &PodGroup) -> GroupInfo {
    GroupInfo {
        namespace: pg.namespace().unwrap_or_default(),
        name: pg.name_any(),
        uid: pg.uid().unwrap_or_default(),
        min_member: pg.spec.min_member.unwrap_or(0),
        created_ms: ms(pg.metadata.creation_timestamp.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn gpu_counts() {
        assert_eq!(parse_gpu_count("4"), Some(4));
        assert_eq!(parse_gpu_count("+2"), Some(2));
        for bad in ["-1", "0.5", "500m", "1k", "", "x"] {
            assert_eq!(parse_gpu_count(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_pod_asks_by_annotation_or_resource() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n", "labels": {POD_GROUP_LABEL: "g", "team": "t"},
                         "annotations": {GPU_INDICES_ANNOTATION: "3,1", GANG_PLAN_ANNOTATION: "a=n1:1,3"}},
            "spec": {"schedulerName": "gangway", "nodeName": "n1", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}},
                {"name": "d", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}
        }));
        let i = pod_info(&p, "gangway", "nvidia.com/gpu", "team");
        assert_eq!(i.gpus, Ok(3));
        assert!(i.ours && i.holds());
        assert_eq!(i.group.as_deref(), Some("g"));
        assert_eq!(i.vc_label.as_deref(), Some("t"));
        assert_eq!(i.gpu_indices, Some(vec![1, 3]));
        assert_eq!(i.node.as_deref(), Some("n1"));
        let p = pod(serde_json::json!({
            "metadata": {"name": "b", "namespace": "n", "annotations": {GPUS_ANNOTATION: "-1"}},
            "spec": {"containers": []}
        }));
        let i = pod_info(&p, "gangway", "nvidia.com/gpu", "");
        assert!(!i.ours);
        let e = i.gpus.unwrap_err();
        assert_eq!(e.reason(), "InvalidGPURequest");
        assert!(
            e.to_string().contains("n/b") && e.to_string().contains("\"-1\""),
            "{e}"
        );
    }

    #[test]
    fn nodes_health_and_domains() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"rack": "r2"}},
            "spec": {"unschedulable": true},
            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let i = node_info(&n, "nvidia.com/gpu", &["zone".into(), "rack".into()]);
        assert_eq!(i.gpus, 8);
        assert_eq!(i.domains, ["(none)", "r2"]);
        assert_eq!(i.health, Health::Draining);
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n2"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        }))
        .unwrap();
        let i = node_info(&n, "nvidia.com/gpu", &[]);
        assert_eq!((i.gpus, i.health), (0, Health::Down));
    }
}
