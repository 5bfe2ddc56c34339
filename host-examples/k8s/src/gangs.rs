//! Gangs from pods: the pods of one PodGroup (label
//! `scheduling.x-k8s.io/pod-group`) are one gang, a pod without a group is
//! a gang of one. What each gang is this cycle ([`GangView`]) and what is
//! wrong with it ([`GangProblem`]), from the cached objects alone.

use std::collections::BTreeMap;

use gangway_core::GpuRequest;

use super::GangProblem;
use super::fit::PodNeeds;
use super::objects::{GroupInfo, PodInfo};
use super::plan::{Plan, PodNeed};

/// Which gang: a PodGroup, or a pod of its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GangKey {
    /// The pods of a PodGroup.
    Group {
        /// Namespace.
        namespace: String,
        /// PodGroup name.
        name: String,
    },
    /// One pod without a group.
    Pod {
        /// Namespace.
        namespace: String,
        /// Pod name.
        name: String,
    },
}

impl GangKey {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        match self {
            GangKey::Group { namespace, .. } | GangKey::Pod { namespace, .. } => namespace,
        }
    }

    /// The PodGroup's or pod's name.
    pub fn name(&self) -> &str {
        match self {
            GangKey::Group { name, .. } | GangKey::Pod { name, .. } => name,
        }
    }
}

impl std::fmt::Display for GangKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GangKey::Group { namespace, name } => write!(f, "podgroup {namespace}/{name}"),
            GangKey::Pod { namespace, name } => write!(f, "pod {namespace}/{name}"),
        }
    }
}

/// One gang as the cache shows it this cycle.
#[derive(Clone, Debug)]
pub struct GangView<'a> {
    /// Which gang.
    pub key: GangKey,
    /// Its PodGroup, if it has one (and it exists).
    pub group: Option<&'a GroupInfo>,
    /// Its pods name a PodGroup that does not exist (not created yet, or
    /// deleted): the gang waits for it and is never placed piecemeal.
    pub awaiting_group: bool,
    /// Its pods of our scheduler that are not being deleted, by name.
    pub pods: Vec<&'a PodInfo>,
    /// Pods that must exist for the gang to be placed.
    pub min_member: usize,
    /// Its virtual cluster's name.
    pub vc: String,
    /// What is wrong with it, if anything (it is then not placed).
    pub problem: Option<GangProblem>,
    /// The plan it was bound with (from a bound pod's annotation).
    pub plan: Option<Plan>,
    /// Unix ms of its newest pod's creation.
    pub last_pod_ms: u64,
}

impl GangView<'_> {
    /// The GPUs the gang asks for: its PodGroup's annotations when they
    /// name types or memory; else the types its pods select under
    /// `type_label` ([`selected_types`]), when every live pod selects the
    /// same; else any type.
    pub fn gpu_request(&self, type_label: &str) -> GpuRequest {
        if let Some(Ok(r)) = self.group.map(|g| &g.gpu_request)
            && !r.is_any()
        {
            return r.clone();
        }
        if type_label.is_empty() {
            return GpuRequest::default();
        }
        let mut selected = self.live().map(|p| selected_types(&p.needs, type_label));
        let Some(Some(first)) = selected.next() else {
            return GpuRequest::default();
        };
        if selected.all(|t| t.as_ref() == Some(&first)) {
            GpuRequest::types(first)
        } else {
            GpuRequest::default()
        }
    }

    /// Pods not ended: running, or waiting to.
    pub fn live(&self) -> impl Iterator<Item = &&PodInfo> {
        self.pods.iter().filter(|p| !p.phase.ended())
    }

    /// Live pods not bound yet.
    pub fn unbound(&self) -> impl Iterator<Item = &&PodInfo> {
        self.live().filter(|p| p.node.is_none())
    }

    /// What its live pods need, in name order.
    pub fn needs(&self) -> Vec<PodNeed> {
        self.live()
            .map(|p| PodNeed {
                pod: p.name.clone(),
                gpus: p.gpus.clone().unwrap_or(0),
            })
            .collect()
    }

    /// GPUs its live pods ask for.
    pub fn gpus(&self) -> u32 {
        self.live().map(|p| p.gpus.clone().unwrap_or(0)).sum()
    }

    /// Enough live pods to be placed (`minMember` of its PodGroup, which
    /// exists), none bound.
    pub fn complete(&self) -> bool {
        !self.awaiting_group && self.live().count() >= self.min_member && self.plan.is_none()
    }

    /// Every pod it ever had ended well.
    pub fn all_succeeded(&self) -> bool {
        self.pods
            .iter()
            .all(|p| p.phase == super::objects::Phase::Succeeded)
    }
}

/// The cluster's limits a gang is checked against.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// GPUs of the whole cluster.
    pub cluster_gpus: u32,
    /// GPUs of the largest node.
    pub node_gpus: u32,
}

/// Groups our pods (`ours`, not being deleted) into gangs, with every
/// PodGroup (even one without pods yet), `vc_of` naming each pod's VC and
/// `known_vc` saying whether a VC is admitted.
pub fn collect<'a>(
    pods: &'a [PodInfo],
    groups: &'a [GroupInfo],
    limits: Limits,
    vc_of: impl Fn(&PodInfo) -> String,
    known_vc: impl Fn(&str) -> Result<(), GangProblem>,
) -> BTreeMap<GangKey, GangView<'a>> {
    let by_name: BTreeMap<(&str, &str), &GroupInfo> = groups
        .iter()
        .map(|g| ((g.namespace.as_str(), g.name.as_str()), g))
        .collect();
    let mut out: BTreeMap<GangKey, GangView<'a>> = BTreeMap::new();
    for g in groups {
        let key = GangKey::Group {
            namespace: g.namespace.clone(),
            name: g.name.clone(),
        };
        out.insert(key.clone(), empty_view(key, Some(g), g.namespace.clone()));
    }
    for p in pods.iter().filter(|p| p.ours && !p.terminating) {
        let key = match &p.group {
            Some(name) => GangKey::Group {
                namespace: p.namespace.clone(),
                name: name.clone(),
            },
            None => GangKey::Pod {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            },
        };
        let group = p
            .group
            .as_deref()
            .and_then(|g| by_name.get(&(p.namespace.as_str(), g)).copied());
        let view = out
            .entry(key.clone())
            .or_insert_with(|| empty_view(key, group, vc_of(p)));
        view.vc = vc_of(p);
        view.awaiting_group |= p.group.is_some() && group.is_none();
        view.last_pod_ms = view.last_pod_ms.max(p.created_ms);
        view.pods.push(p);
    }
    for view in out.values_mut() {
        view.pods.sort_by(|a, b| a.name.cmp(&b.name));
        let plan = view
            .live()
            .filter(|p| p.node.is_some())
            .find_map(|p| p.plan.as_deref().and_then(Plan::parse));
        view.plan = plan;
        view.problem = problem(view, limits, &known_vc);
    }
    out
}

/// The GPU types a pod selects by the node label `type_label`: its
/// `nodeSelector`'s value, else the values of the `In` requirements on the
/// label in its required node-affinity terms (in order, when every term has
/// one: the terms are alternatives). `None`: it does not restrict the type.
pub fn selected_types(needs: &PodNeeds, type_label: &str) -> Option<Vec<String>> {
    if let Some((_, v)) = needs.node_selector.iter().find(|(k, _)| k == type_label) {
        return Some(vec![v.clone()]);
    }
    if needs.affinity.is_empty() {
        return None;
    }
    let mut types: Vec<String> = Vec::new();
    for term in &needs.affinity {
        let r = term
            .iter()
            .find(|r| !r.field && r.key == type_label && r.operator == "In")?;
        for v in &r.values {
            if !types.contains(v) {
                types.push(v.clone());
            }
        }
    }
    Some(types)
}

fn empty_view<'a>(key: GangKey, group: Option<&'a GroupInfo>, vc: String) -> GangView<'a> {
    GangView {
        min_member: group.map_or(1, |g| usize::try_from(g.min_member.max(0)).unwrap_or(0)),
        key,
        group,
        awaiting_group: false,
        pods: Vec::new(),
        vc,
        problem: None,
        plan: None,
        last_pod_ms: 0,
    }
}

/// What keeps a gang from ever being placed, checked in the order a user
/// would fix them: the pods' requests, the group, the VC, the size.
fn problem(
    view: &GangView<'_>,
    limits: Limits,
    known_vc: &impl Fn(&str) -> Result<(), GangProblem>,
) -> Option<GangProblem> {
    for p in &view.pods {
        if let Err(e) = &p.gpus {
            return Some(e.clone());
        }
    }
    if let Some(g) = view.group
        && g.min_member < 1
    {
        return Some(GangProblem::MinMemberTooSmall {
            group: format!("{}/{}", g.namespace, g.name),
            min_member: g.min_member,
        });
    }
    if let Some(Err(e)) = view.group.map(|g| &g.gpu_request) {
        return Some(e.clone());
    }
    let gang = view.key.to_string();
    let mut sizes: Vec<u32> = view
        .pods
        .iter()
        .filter_map(|p| p.gpus.clone().ok())
        .filter(|g| *g > 0)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.len() > 1 {
        return Some(GangProblem::MixedGpuCounts {
            gang,
            counts: sizes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    if !view.pods.is_empty()
        && let Err(mut e) = known_vc(&view.vc)
    {
        if let GangProblem::UnknownVc { gang: g, .. } = &mut e {
            *g = gang;
        }
        return Some(e);
    }
    size_problem(view, limits, sizes.first().copied().unwrap_or(0))
}

/// A gang larger than the cluster, a pod larger than any node, a group
/// whose `minMember` pods could never all fit, or no GPUs at all.
fn size_problem(view: &GangView<'_>, limits: Limits, pod_gpus: u32) -> Option<GangProblem> {
    let gang = view.key.to_string();
    let too_large = |why: String| {
        Some(GangProblem::TooLarge {
            gang: gang.clone(),
            why,
        })
    };
    if view.pods.is_empty() {
        return None;
    }
    if pod_gpus == 0 {
        return Some(GangProblem::NoGpus { gang });
    }
    if limits.cluster_gpus == 0 {
        return None;
    }
    if pod_gpus > limits.node_gpus {
        return too_large(format!(
            "a pod asks for {pod_gpus} GPUs and the largest node has {}",
            limits.node_gpus
        ));
    }
    let at_least = (view.min_member as u64) * u64::from(pod_gpus);
    let asked = u64::from(view.gpus()).max(at_least);
    if asked > u64::from(limits.cluster_gpus) {
        return too_large(format!(
            "it needs {asked} GPUs (minMember {} x {pod_gpus}) and the cluster has {}",
            view.min_member, limits.cluster_gpus
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::objects::Phase;

    fn pod(name: &str, group: Option<&str>, gpus: Result<u32, GangProblem>) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            uid: name.into(),
            ours: true,
            node: None,
            phase: Phase::Pending,
            terminating: false,
            gpus,
            gpus_annotation: None,
            group: group.map(String::from),
            vc_label: None,
            created_ms: 5,
            gpu_indices: None,
            plan: None,
            needs: Default::default(),
        }
    }

    fn group(name: &str, min: i64) -> GroupInfo {
        GroupInfo {
            namespace: "ns".into(),
            name: name.into(),
            uid: name.into(),
            min_member: min,
            schedule_timeout_s: None,
            min_resources: Default::default(),
            created_ms: 1,
            gpu_request: Ok(Default::default()),
        }
    }

    const LIMITS: Limits = Limits {
        cluster_gpus: 64,
        node_gpus: 8,
    };

    fn gangs<'a>(pods: &'a [PodInfo], groups: &'a [GroupInfo]) -> BTreeMap<GangKey, GangView<'a>> {
        collect(pods, groups, LIMITS, |p| p.namespace.clone(), |_| Ok(()))
    }

    #[test]
    fn groups_and_single_pods() {
        let pods = [
            pod("a", Some("g"), Ok(4)),
            pod("b", Some("g"), Ok(4)),
            pod("solo", None, Ok(1)),
        ];
        let groups = [group("g", 3), group("empty", 2)];
        let g = gangs(&pods, &groups);
        assert_eq!(g.len(), 3);
        let pg = &g[&GangKey::Group {
            namespace: "ns".into(),
            name: "g".into(),
        }];
        assert_eq!((pg.gpus(), pg.min_member, pg.complete()), (8, 3, false));
        assert!(pg.problem.is_none());
        let solo = &g[&GangKey::Pod {
            namespace: "ns".into(),
            name: "solo".into(),
        }];
        assert!(solo.complete());
    }

    /// Pods created before their PodGroup (or left after it was deleted)
    /// wait for it: never a gang of one pod, never placed in part.
    #[test]
    fn pods_without_their_group_wait_for_it() {
        let pods = [pod("a", Some("late"), Ok(4)), pod("b", Some("late"), Ok(4))];
        let g = gangs(&pods, &[]);
        assert_eq!(g.len(), 1);
        let late = g.values().next().unwrap();
        assert!(late.awaiting_group && !late.complete());
        assert!(late.problem.is_none());
        let groups = [group("late", 2)];
        let g = gangs(&pods, &groups);
        assert!(g.values().next().unwrap().complete());
    }

    #[test]
    fn pods_select_gpu_types_by_node_selector_or_required_affinity() {
        use crate::fit::Requirement;
        const L: &str = "nvidia.com/gpu.product";
        let req = |key: &str, op: &str, values: &[&str]| Requirement {
            field: false,
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let mut needs = PodNeeds::default();
        assert_eq!(selected_types(&needs, L), None);
        needs.affinity = vec![
            vec![req("zone", "In", &["a"]), req(L, "In", &["H100", "A100"])],
            vec![req(L, "In", &["A100", "L40S"])],
        ];
        assert_eq!(
            selected_types(&needs, L),
            Some(vec!["H100".into(), "A100".into(), "L40S".into()])
        );
        // A term without an In on the label: that alternative allows any type.
        needs.affinity.push(vec![req(L, "NotIn", &["K80"])]);
        assert_eq!(selected_types(&needs, L), None);
        // A nodeSelector on the label decides.
        needs.node_selector = vec![(L.into(), "V100".into())];
        assert_eq!(selected_types(&needs, L), Some(vec!["V100".into()]));
    }

    #[test]
    fn problems_are_named() {
        let bad = GangProblem::BadGpuCount {
            pod: "ns/x".into(),
            resource: "r".into(),
            value: "0.5".into(),
        };
        let pods = [
            pod("x", None, Err(bad.clone())),
            pod("m1", Some("mixed"), Ok(2)),
            pod("m2", Some("mixed"), Ok(4)),
            pod("z", Some("zero"), Ok(1)),
            pod("big", Some("big"), Ok(8)),
            pod("huge", None, Ok(16)),
            pod("none", None, Ok(0)),
        ];
        let groups = [group("mixed", 2), group("zero", 0), group("big", 9)];
        let g = gangs(&pods, &groups);
        let p = |k: GangKey| g[&k].problem.clone().unwrap();
        let pk = |n: &str| GangKey::Pod {
            namespace: "ns".into(),
            name: n.into(),
        };
        let gk = |n: &str| GangKey::Group {
            namespace: "ns".into(),
            name: n.into(),
        };
        assert_eq!(p(pk("x")), bad);
        assert_eq!(p(gk("mixed")).reason(), "MixedGPUCounts");
        assert_eq!(p(gk("zero")).reason(), "InvalidMinMember");
        let big = p(gk("big"));
        assert!(
            big.to_string().contains("needs 72 GPUs (minMember 9 x 8)"),
            "{big}"
        );
        assert!(p(pk("huge")).to_string().contains("largest node has 8"));
        assert_eq!(p(pk("none")).reason(), "NoGPUs");
        let unknown = collect(
            &pods[..1],
            &[],
            LIMITS,
            |_| "v".into(),
            |vc| {
                Err(GangProblem::UnknownVc {
                    gang: String::new(),
                    vc: vc.into(),
                    known: "a".into(),
                    configmap: "c".into(),
                })
            },
        );
        // The pod's own problem comes first.
        assert_eq!(
            unknown.values().next().unwrap().problem.clone().unwrap(),
            bad
        );
    }
}
