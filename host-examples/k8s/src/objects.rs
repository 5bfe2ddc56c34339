//! What the scheduler reads from API objects, as small plain values: a
//! node's GPUs, domains and health; a pod's gang, GPU count, binding and
//! phase; a PodGroup's `minMember`. Everything here is a pure function of
//! one object, so it is tested without a cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use gangway_core::{GpuRequest, Health};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use super::GangProblem;
use super::fit::{self, NodeFacts, PodNeeds};
use super::podgroup::PodGroup;

/// The label that puts a pod in a PodGroup (scheduler-plugins' Coscheduling).
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// An annotation some clusters used to ask for GPUs. A pod's GPUs come
/// from its `resources` only (what the kubelet and every scheduler count):
/// an annotation that disagrees is reported as an Event and ignored.
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

/// Annotation on a PodGroup: the GPU types its gang may run on, most
/// preferred first, comma-separated (`H100,A100-SXM4-80GB`); absent: any.
pub const GPU_TYPES_ANNOTATION: &str = "gangway.io/gpu-types";
/// Annotation on a PodGroup: the least memory of each GPU, in GB.
pub const MIN_GPU_MEMORY_ANNOTATION: &str = "gangway.io/min-gpu-memory-gb";

/// The node labels that say what a node's GPUs are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuTypeLabels {
    /// The label naming the GPU type ("": types are not read).
    pub type_label: String,
    /// The label giving one GPU's memory in MiB.
    pub memory_label: String,
}

impl GpuTypeLabels {
    /// A node's GPU type and the memory of one GPU in GB (0: not given or
    /// not a number), if it has the type label.
    pub fn of(&self, labels: &BTreeMap<String, String>) -> Option<(String, u32)> {
        if self.type_label.is_empty() {
            return None;
        }
        let name = labels.get(&self.type_label)?.trim();
        if name.is_empty() {
            return None;
        }
        let mib = labels
            .get(&self.memory_label)
            .and_then(|m| m.trim().parse::<u64>().ok())
            .unwrap_or(0);
        Some((
            name.to_string(),
            u32::try_from(mib / 1024).unwrap_or(u32::MAX),
        ))
    }
}

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
    /// The type of its GPUs and one GPU's memory in GB, from its labels
    /// (`None`: untyped, the type `gpu`).
    pub gpu_type: Option<(String, u32)>,
    /// Its labels, taints and allocatable resources.
    pub facts: Arc<NodeFacts>,
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
    /// GPUs it asks for (its `resources`), or what is wrong with the request.
    pub gpus: Result<u32, GangProblem>,
    /// The value of its [`GPUS_ANNOTATION`] when that disagrees with its
    /// resources (reported, never counted).
    pub gpus_annotation: Option<String>,
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
    /// What it needs of a node besides GPUs (for pods of ours).
    pub needs: Arc<PodNeeds>,
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
    /// `spec.scheduleTimeoutSeconds`, if set and positive.
    pub schedule_timeout_s: Option<u64>,
    /// `spec.minResources`, in thousandths (GPUs under their resource name).
    pub min_resources: fit::Resources,
    /// Creation time, Unix milliseconds.
    pub created_ms: u64,
    /// The GPU types and memory its gang asks for (its annotations
    /// [`GPU_TYPES_ANNOTATION`] and [`MIN_GPU_MEMORY_ANNOTATION`]).
    pub gpu_request: Result<GpuRequest, GangProblem>,
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

/// The GPUs a pod asks for: the sum over containers of the resource's
/// limit (or request), or the largest init container's if more. Never an
/// annotation: a user can write one, and the kubelet would not honour it.
fn pod_gpus(pod: &Pod, resource: &str) -> Result<u32, GangProblem> {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let bad = |resource: &str, value: &str| GangProblem::BadGpuCount {
        pod: key.clone(),
        resource: resource.to_string(),
        value: value.to_string(),
    };
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
    let gpus = pod_gpus(pod, resource);
    let gpus_annotation = annotations
        .get(GPUS_ANNOTATION)
        .filter(|v| gpus.as_ref().ok().copied() != parse_gpu_count(v))
        .cloned();
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
        gpus,
        gpus_annotation,
        group: pod.labels().get(POD_GROUP_LABEL).cloned(),
        vc_label: (!vc_label.is_empty())
            .then(|| pod.labels().get(vc_label).cloned())
            .flatten(),
        created_ms: ms(pod.metadata.creation_timestamp.as_ref()),
        gpu_indices: annotations
            .get(GPU_INDICES_ANNOTATION)
            .and_then(|t| parse_indices(t)),
        plan: annotations.get(GANG_PLAN_ANNOTATION).cloned(),
        needs: Arc::new(fit::pod_needs(pod, resource)),
    }
}

/// A node as Gangway sees it: GPUs from the resource's allocatable
/// (capacity when absent; nodes without GPUs have 0), domains from the
/// `levels` labels, health from its Ready condition (not Ready: down) and
/// `spec.unschedulable` (draining), GPU type from `types`' labels.
pub fn node_info(
    node: &Node,
    resource: &str,
    levels: &[String],
    types: &GpuTypeLabels,
) -> NodeInfo {
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
        gpu_type: types.of(node.labels()),
        facts: Arc::new(fit::node_facts(node)),
    }
}

/// A PodGroup as Gangway sees it.
pub fn group_info(pg: &PodGroup) -> GroupInfo {
    GroupInfo {
        namespace: pg.namespace().unwrap_or_default(),
        name: pg.name_any(),
        uid: pg.uid().unwrap_or_default(),
        min_member: pg.spec.min_member.unwrap_or(0),
        schedule_timeout_s: pg
            .spec
            .schedule_timeout_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0),
        min_resources: pg
            .spec
            .min_resources
            .iter()
            .flatten()
            .filter_map(|(k, q)| Some((k.clone(), crate::quantity::milli(&q.0)?)))
            .collect(),
        created_ms: ms(pg.metadata.creation_timestamp.as_ref()),
        gpu_request: group_gpu_request(pg),
    }
}

/// The GPU request a PodGroup's annotations make: types most preferred
/// first (blank entries ignored), a memory minimum in whole GB.
fn group_gpu_request(pg: &PodGroup) -> Result<GpuRequest, GangProblem> {
    let notes = pg.annotations();
    let types: Vec<String> = notes
        .get(GPU_TYPES_ANNOTATION)
        .map(|t| {
            t.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let min_memory_gb = match notes.get(MIN_GPU_MEMORY_ANNOTATION) {
        None => 0,
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map_err(|_| GangProblem::BadGpuRequest {
                group: format!("{}/{}", pg.namespace().unwrap_or_default(), pg.name_any()),
                annotation: MIN_GPU_MEMORY_ANNOTATION.into(),
                value: v.clone(),
            })?,
    };
    Ok(GpuRequest {
        types,
        min_memory_gb,
    })
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
    fn a_pod_asks_by_its_resources() {
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
        assert_eq!(i.gpus_annotation, None);
        let p = pod(serde_json::json!({
            "metadata": {"name": "b", "namespace": "n"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "-1"}}}]}
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
    fn an_annotation_never_changes_the_count() {
        // The case: 8 GPUs requested, the annotation says 1.
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n", "annotations": {GPUS_ANNOTATION: "1"}},
            "spec": {"schedulerName": "gangway", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
        }));
        let i = pod_info(&p, "gangway", "nvidia.com/gpu", "");
        assert_eq!(i.gpus, Ok(8));
        assert_eq!(i.gpus_annotation.as_deref(), Some("1"));
        // An annotation that agrees is not worth a word.
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n", "annotations": {GPUS_ANNOTATION: "8"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
        }));
        assert_eq!(
            pod_info(&p, "gangway", "nvidia.com/gpu", "").gpus_annotation,
            None
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
        let types = GpuTypeLabels {
            type_label: "nvidia.com/gpu.product".into(),
            memory_label: "nvidia.com/gpu.memory".into(),
        };
        let i = node_info(
            &n,
            "nvidia.com/gpu",
            &["zone".into(), "rack".into()],
            &types,
        );
        assert_eq!(i.gpus, 8);
        assert_eq!(i.domains, ["(none)", "r2"]);
        assert_eq!(i.health, Health::Draining);
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n2"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        }))
        .unwrap();
        let i = node_info(&n, "nvidia.com/gpu", &[], &types);
        assert_eq!((i.gpus, i.health), (0, Health::Down));
        assert_eq!(i.gpu_type, None);
    }

    #[test]
    fn a_podgroup_asks_for_gpu_types_by_annotation() {
        let pg = |notes: serde_json::Value| -> PodGroup {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns", "annotations": notes},
                "spec": {"minMember": 2}
            }))
            .unwrap()
        };
        let asked = group_info(&pg(serde_json::json!({
            GPU_TYPES_ANNOTATION: " H100, ,A100-SXM4-80GB ",
            MIN_GPU_MEMORY_ANNOTATION: "40"
        })));
        assert_eq!(
            asked.gpu_request,
            Ok(GpuRequest::types(["H100", "A100-SXM4-80GB"]).with_min_memory_gb(40))
        );
        assert_eq!(
            group_info(&pg(serde_json::json!({}))).gpu_request,
            Ok(GpuRequest::default())
        );
        let bad = group_info(&pg(serde_json::json!({MIN_GPU_MEMORY_ANNOTATION: "80GB"})));
        let e = bad.gpu_request.unwrap_err().to_string();
        assert!(e.contains("ns/g") && e.contains("80GB"), "{e}");
    }

    #[test]
    fn a_nodes_gpu_type_and_memory_come_from_its_labels() {
        let types = GpuTypeLabels {
            type_label: "nvidia.com/gpu.product".into(),
            memory_label: "nvidia.com/gpu.memory".into(),
        };
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let a100 = labels(&[
            ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
            ("nvidia.com/gpu.memory", "81920"),
        ]);
        assert_eq!(types.of(&a100), Some(("NVIDIA-A100-SXM4-80GB".into(), 80)));
        // Memory not given, or not a number: not known (0).
        let t4 = labels(&[
            ("nvidia.com/gpu.product", "Tesla-T4"),
            ("nvidia.com/gpu.memory", "lots"),
        ]);
        assert_eq!(types.of(&t4), Some(("Tesla-T4".into(), 0)));
        assert_eq!(types.of(&labels(&[("nvidia.com/gpu.product", " ")])), None);
        assert_eq!(types.of(&labels(&[])), None);
        // Types off: every node alike.
        assert_eq!(GpuTypeLabels::default().of(&a100), None);
    }
}
