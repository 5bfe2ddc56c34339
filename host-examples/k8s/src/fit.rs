//! Where a pod may run, decided as kube-scheduler's filter plugins decide:
//!
//! * NodeName: a pod that names its node runs only there;
//! * NodeAffinity: every `nodeSelector` label matches, and one of the
//!   required node-affinity terms does (`In`, `NotIn`, `Exists`,
//!   `DoesNotExist`, `Gt`, `Lt` on labels; `In`, `NotIn` on
//!   `metadata.name`);
//! * TaintToleration: every `NoSchedule` and `NoExecute` taint of the node
//!   is tolerated;
//! * NodeResourcesFit: for every resource the pod requests (its
//!   containers' sum, or an init container's if larger, sidecars added,
//!   plus the pod's overhead, as `resource.PodRequests` computes it), the
//!   requests of every pod on the node that has not ended, ours and
//!   others', plus this pod's, stay within the node's allocatable; one pod
//!   slot is always requested.
//!
//! The GPU resource is not checked here: Gangway's books place GPUs down
//! to their indices. A cordoned node is draining in the topology already.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::quantity;

/// Amounts by resource name, in thousandths (millicores for CPU).
pub type Resources = BTreeMap<String, i128>;

/// One requirement of a node-affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    /// On `metadata.name` (a `matchFields` term) rather than a label.
    pub field: bool,
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`.
    pub operator: String,
    /// Its values.
    pub values: Vec<String>,
}

/// A toleration, as the pod spec writes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tolerates {
    /// The taint key (`None`: every key, with `Exists`).
    pub key: Option<String>,
    /// `Exists` (any value) rather than `Equal`.
    pub exists: bool,
    /// The value, for `Equal`.
    pub value: String,
    /// The effect (`None`: every effect).
    pub effect: Option<String>,
}

/// What a pod needs of a node besides GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodNeeds {
    /// Its requests (GPUs left out), `pods` included.
    pub requests: Vec<(String, i128)>,
    /// Its tolerations.
    pub tolerations: Vec<Tolerates>,
    /// Its `nodeSelector`.
    pub node_selector: Vec<(String, String)>,
    /// Its required node-affinity terms (any one must match); empty: none.
    pub affinity: Vec<Vec<Requirement>>,
    /// The node it names, if any.
    pub node_name: Option<String>,
}

/// What a node offers and asks, besides GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its `NoSchedule` and `NoExecute` taints: key, value, effect.
    pub taints: Vec<(String, String, String)>,
    /// Its allocatable resources.
    pub allocatable: Resources,
}

/// Why a pod cannot run on a node, in kube-scheduler's words.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unfit {
    /// It names another node.
    NodeName,
    /// Its node selector or required affinity does not match.
    Affinity,
    /// A taint it does not tolerate: `key=value:effect`.
    Taint(String),
    /// Too little of a resource left.
    Insufficient(String),
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NodeName => write!(f, "node(s) didn't match the requested node name"),
            Unfit::Affinity => write!(f, "node(s) didn't match Pod's node affinity/selector"),
            Unfit::Taint(t) => write!(f, "node(s) had untolerated taint {{{t}}}"),
            Unfit::Insufficient(r) => write!(f, "Insufficient {r}"),
        }
    }
}

fn add_all(into: &mut Resources, from: Option<&BTreeMap<String, Quantity>>, skip: &str) {
    for (k, q) in from.into_iter().flatten() {
        if k != skip
            && let Some(v) = quantity::milli(&q.0)
        {
            *into.entry(k.clone()).or_default() += v.max(0);
        }
    }
}

fn container_requests(c: &Container, skip: &str) -> Resources {
    let mut r = Resources::new();
    add_all(
        &mut r,
        c.resources.as_ref().and_then(|r| r.requests.as_ref()),
        skip,
    );
    r
}

fn max_into(into: &mut Resources, other: &Resources) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

fn sum_into(into: &mut Resources, other: &Resources) {
    for (k, v) in other {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// A pod's requests as the scheduler counts them (see the module docs),
/// the resource `skip` (the GPUs) left out.
pub fn pod_requests(pod: &Pod, skip: &str) -> Resources {
    let Some(spec) = &pod.spec else {
        return Resources::new();
    };
    let mut reqs = Resources::new();
    for c in &spec.containers {
        sum_into(&mut reqs, &container_requests(c, skip));
    }
    let mut sidecars = Resources::new();
    let mut init = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c, skip);
        if c.restart_policy.as_deref() == Some("Always") {
            sum_into(&mut reqs, &r);
            sum_into(&mut sidecars, &r);
        } else {
            let mut tmp = r;
            sum_into(&mut tmp, &sidecars);
            max_into(&mut init, &tmp);
        }
    }
    max_into(&mut reqs, &init);
    add_all(&mut reqs, spec.overhead.as_ref(), skip);
    reqs
}

fn requirement(r: &NodeSelectorRequirement, field: bool) -> Requirement {
    Requirement {
        field,
        key: r.key.clone(),
        operator: r.operator.clone(),
        values: r.values.clone().unwrap_or_default(),
    }
}

fn term(t: &NodeSelectorTerm) -> Vec<Requirement> {
    let mut out: Vec<Requirement> = t
        .match_expressions
        .iter()
        .flatten()
        .map(|r| requirement(r, false))
        .collect();
    out.extend(
        t.match_fields
            .iter()
            .flatten()
            .map(|r| requirement(r, true)),
    );
    out
}

fn tolerates(t: &Toleration) -> Tolerates {
    Tolerates {
        key: t.key.clone().filter(|k| !k.is_empty()),
        exists: t.operator.as_deref() == Some("Exists"),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone().filter(|e| !e.is_empty()),
    }
}

/// What a pod needs of a node (see [`PodNeeds`]), `gpu_resource` left out.
pub fn pod_needs(pod: &Pod, gpu_resource: &str) -> PodNeeds {
    let Some(spec) = &pod.spec else {
        return PodNeeds::default();
    };
    let mut requests: Vec<(String, i128)> = pod_requests(pod, gpu_resource)
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .collect();
    requests.push(("pods".into(), 1_000));
    requests.sort();
    let affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| s.node_selector_terms.iter().map(term).collect())
        .unwrap_or_default();
    let mut tolerations: Vec<Tolerates> =
        spec.tolerations.iter().flatten().map(tolerates).collect();
    tolerations.sort();
    PodNeeds {
        requests,
        tolerations,
        node_selector: spec
            .node_selector
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        affinity,
        node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
    }
}

/// What a node offers and asks (see [`NodeFacts`]).
pub fn node_facts(node: &Node) -> NodeFacts {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let taints = node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .map(|t| {
            (
                t.key.clone(),
                t.value.clone().unwrap_or_default(),
                t.effect.clone(),
            )
        })
        .collect();
    let mut allocatable = Resources::new();
    let status = node.status.as_ref();
    add_all(
        &mut allocatable,
        status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())),
        "",
    );
    NodeFacts {
        labels,
        taints,
        allocatable,
    }
}

/// Whether one requirement holds for a node named `name` with `labels`.
fn holds(r: &Requirement, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let value = if r.field {
        (r.key == "metadata.name").then_some(name)
    } else {
        labels.get(&r.key).map(String::as_str)
    };
    let number = |v: &str| v.parse::<i64>().ok();
    match (r.operator.as_str(), value) {
        ("In", Some(v)) => r.values.iter().any(|x| x == v),
        ("NotIn", v) => v.is_none_or(|v| r.values.iter().all(|x| x != v)),
        ("Exists", v) => v.is_some(),
        ("DoesNotExist", v) => v.is_none(),
        ("Gt", Some(v)) => {
            matches!((number(v), r.values.first().and_then(|x| number(x))), (Some(a), Some(b)) if a > b)
        }
        ("Lt", Some(v)) => {
            matches!((number(v), r.values.first().and_then(|x| number(x))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Whether a toleration tolerates a taint `(key, value, effect)`.
fn tolerated(t: &Tolerates, taint: &(String, String, String)) -> bool {
    let key = t.key.as_ref().is_none_or(|k| *k == taint.0);
    let effect = t.effect.as_ref().is_none_or(|e| *e == taint.2);
    let value = t.exists || t.value == taint.1;
    // An empty key matches every key only with `Exists`.
    key && effect && value && (t.key.is_some() || t.exists)
}

/// The filters that do not depend on what runs on the node: name,
/// selector and affinity, taints.
pub fn static_fit(needs: &PodNeeds, node: &str, facts: &NodeFacts) -> Result<(), Unfit> {
    if needs.node_name.as_deref().is_some_and(|n| n != node) {
        return Err(Unfit::NodeName);
    }
    let selected = needs
        .node_selector
        .iter()
        .all(|(k, v)| facts.labels.get(k) == Some(v));
    let affine = needs.affinity.is_empty()
        || needs
            .affinity
            .iter()
            .any(|t| !t.is_empty() && t.iter().all(|r| holds(r, node, &facts.labels)));
    if !selected || !affine {
        return Err(Unfit::Affinity);
    }
    for taint in &facts.taints {
        if !needs.tolerations.iter().any(|t| tolerated(t, taint)) {
            let value = if taint.1.is_empty() {
                String::new()
            } else {
                format!("={}", taint.1)
            };
            return Err(Unfit::Taint(format!("{}{value}:{}", taint.0, taint.2)));
        }
    }
    Ok(())
}

/// Whether `count` more pods needing `needs` fit what is left of the
/// node's allocatable after `used`.
pub fn resources_fit(
    needs: &PodNeeds,
    count: i128,
    facts: &NodeFacts,
    used: Option<&Resources>,
) -> Result<(), Unfit> {
    for (resource, want) in &needs.requests {
        let have = facts.allocatable.get(resource).copied().unwrap_or(0);
        let taken = used.and_then(|u| u.get(resource)).copied().unwrap_or(0);
        if taken.saturating_add(want.saturating_mul(count)) > have {
            let name = if resource == "pods" {
                "pods".to_string()
            } else {
                resource.clone()
            };
            return Err(Unfit::Insufficient(name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    }

    fn node(json: serde_json::Value) -> NodeFacts {
        node_facts(&serde_json::from_value(json).unwrap())
    }

    #[test]
    fn requests_as_the_scheduler_sums_them() {
        let p = pod(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [
                {"name": "i", "resources": {"requests": {"cpu": "3"}}},
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}}],
            "overhead": {"cpu": "100m"}
        }));
        let r = pod_requests(&p, "nvidia.com/gpu");
        // max(1.5 + sidecar, init 3) + overhead 0.1 CPU; memory 1Gi + 1Gi sidecar.
        assert_eq!(r["cpu"], 3_100);
        assert_eq!(r["memory"], 2 * 1_073_741_824_000);
        assert!(!r.contains_key("nvidia.com/gpu"));
    }

    #[test]
    fn filters_as_kube_scheduler_defines_them() {
        let n = node(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"pool": "train", "gen": "3"}},
            "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                {"key": "soft", "effect": "PreferNoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "2"}}
        }));
        let plain = pod_needs(&pod(serde_json::json!({"containers": []})), "g");
        assert_eq!(
            static_fit(&plain, "n1", &n),
            Err(Unfit::Taint("dedicated=ml:NoSchedule".into()))
        );
        let tol = pod_needs(
            &pod(
                serde_json::json!({"containers": [], "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "nodeSelector": {"pool": "train"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["5"]}]},
                    {"matchExpressions": [{"key": "gen", "operator": "In", "values": ["3", "4"]}],
                     "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]}}}}),
            ),
            "g",
        );
        assert_eq!(static_fit(&tol, "n1", &n), Ok(()));
        let mut other = tol.clone();
        other.node_selector = vec![("pool".into(), "infer".into())];
        assert_eq!(static_fit(&other, "n1", &n), Err(Unfit::Affinity));
        let mut named = tol.clone();
        named.node_name = Some("n2".into());
        assert_eq!(static_fit(&named, "n1", &n), Err(Unfit::NodeName));
        let all = Tolerates {
            key: None,
            exists: true,
            value: String::new(),
            effect: None,
        };
        assert!(tolerated(
            &all,
            &("k".into(), "v".into(), "NoExecute".into())
        ));
        let no_key_equal = Tolerates {
            key: None,
            exists: false,
            value: "v".into(),
            effect: None,
        };
        assert!(!tolerated(
            &no_key_equal,
            &("k".into(), "v".into(), "NoExecute".into())
        ));
    }

    #[test]
    fn resources_count_what_is_used() {
        let n = node(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3"}}
        }));
        let p = pod_needs(
            &pod(
                serde_json::json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}),
            ),
            "g",
        );
        assert_eq!(resources_fit(&p, 2, &n, None), Ok(()));
        assert_eq!(
            resources_fit(&p, 3, &n, None),
            Err(Unfit::Insufficient("cpu".into()))
        );
        let mut used = Resources::new();
        used.insert("memory".into(), 7 * 1_073_741_824_000 + 1);
        assert_eq!(
            resources_fit(&p, 1, &n, Some(&used)),
            Err(Unfit::Insufficient("memory".into()))
        );
        used.clear();
        used.insert("pods".into(), 3_000);
        assert_eq!(
            resources_fit(&p, 1, &n, Some(&used)),
            Err(Unfit::Insufficient("pods".into()))
        );
        // An extended resource the node does not have.
        let ext = pod_needs(
            &pod(
                serde_json::json!({"containers": [{"name": "a", "resources": {"requests": {"example.com/fpga": "1"}}}]}),
            ),
            "g",
        );
        assert_eq!(
            resources_fit(&ext, 1, &n, None),
            Err(Unfit::Insufficient("example.com/fpga".into()))
        );
    }

    /// Ephemeral storage is fitted like CPU and memory, as kube-scheduler's
    /// NodeResourcesFit does: the pod's request (its containers' sum, or
    /// an init container's if larger) against the node's allocatable less
    /// what the pods on it request; a node that reports none fits no pod
    /// that asks for some.
    #[test]
    fn ephemeral_storage_is_fitted() {
        let n = node(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "ephemeral-storage": "10Gi", "pods": "10"}}
        }));
        let p = pod_needs(
            &pod(serde_json::json!({
                "containers": [
                    {"name": "a", "resources": {"requests": {"ephemeral-storage": "2Gi"}}},
                    {"name": "b", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}],
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"ephemeral-storage": "4Gi"}}}]
            })),
            "g",
        );
        let gib: i128 = 1_073_741_824_000;
        assert!(p.requests.contains(&("ephemeral-storage".into(), 4 * gib)));
        assert_eq!(resources_fit(&p, 2, &n, None), Ok(()));
        assert_eq!(
            resources_fit(&p, 3, &n, None),
            Err(Unfit::Insufficient("ephemeral-storage".into()))
        );
        let mut used = Resources::new();
        used.insert("ephemeral-storage".into(), 6 * gib + 1);
        assert_eq!(
            resources_fit(&p, 1, &n, Some(&used)),
            Err(Unfit::Insufficient("ephemeral-storage".into()))
        );
        used.insert("ephemeral-storage".into(), 6 * gib);
        assert_eq!(resources_fit(&p, 1, &n, Some(&used)), Ok(()));
        let bare = node(serde_json::json!({
            "metadata": {"name": "n2"},
            "status": {"allocatable": {"cpu": "8", "pods": "10"}}
        }));
        assert_eq!(
            resources_fit(&p, 1, &bare, None),
            Err(Unfit::Insufficient("ephemeral-storage".into()))
        );
    }
}
