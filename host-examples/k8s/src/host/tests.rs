//! The host's cycle against a cluster kept in memory: the objects a watch
//! cache would show, changed by the host's actions the way the API server
//! would change them (or not: a lost reply, a stale cache). Every decision
//! of the cluster's-day cases is checked here without a cluster; the
//! cluster tests (`tests/k8s`) check the same cases against a real API
//! server.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use gangway_core::policy::PolicySet;
use gangway_core::{Health, PlacementStrategy};

use super::nodes::Grace;
use super::{Host, Inputs, ReadOutcome, VcTable};
use crate::objects::{
    GANG_PLAN_ANNOTATION, GPU_INDICES_ANNOTATION, GroupInfo, NodeInfo, Phase, PodInfo,
    parse_indices,
};
use crate::report::{Action, BindOutcome, PodBind};

/// The VC table of a ConfigMap whose data is `data`.
fn vc_table(data: &[(&str, &str)]) -> VcTable {
    let data = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    crate::vcs::table(Some(&data), "gangway-system/gangway-vcs")
}

/// A cluster in memory and the host over it.
struct Fake {
    nodes: Vec<NodeInfo>,
    pods: Vec<PodInfo>,
    groups: Vec<GroupInfo>,
    vcs: VcTable,
    usage: BTreeMap<String, crate::fit::Resources>,
    now_ms: u64,
    /// Milliseconds between cycles.
    step_ms: u64,
    /// Whether the watch caches are current (`Inputs::fresh`).
    fresh: bool,
    uid: u64,
    host: Host,
    /// Every action of every cycle, in order.
    log: Vec<Action>,
}

impl Fake {
    /// `n` nodes of 8 GPUs, one rack, with `policies`.
    fn new(n: usize, policies: PolicySet) -> Fake {
        let nodes = (0..n)
            .map(|i| NodeInfo {
                name: format!("n{i}"),
                gpus: 8,
                domains: vec!["r0".into()],
                health: Health::Up,
                gpu_type: None,
                facts: Default::default(),
            })
            .collect();
        let mut host = Host::new(vec!["rack".into()], policies, PlacementStrategy::default());
        host.set_grace(Grace {
            not_ready_ms: 30_000,
            gpu_drop_ms: 10_000,
        });
        Fake {
            nodes,
            pods: Vec::new(),
            groups: Vec::new(),
            vcs: VcTable::default(),
            usage: BTreeMap::new(),
            now_ms: 1_000_000,
            step_ms: 1_000,
            fresh: true,
            uid: 0,
            host,
            log: Vec::new(),
        }
    }

    fn pod(&mut self, name: &str, group: Option<&str>, gpus: u32) {
        self.uid += 1;
        self.pods.push(PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("u{}", self.uid),
            ours: true,
            node: None,
            phase: Phase::Pending,
            terminating: false,
            gpus: Ok(gpus),
            gpus_annotation: None,
            group: group.map(String::from),
            vc_label: None,
            created_ms: self.now_ms,
            gpu_indices: None,
            plan: None,
            needs: Default::default(),
        });
    }

    fn group(&mut self, name: &str, min: i64) {
        self.groups.push(GroupInfo {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("g-{name}"),
            min_member: min,
            schedule_timeout_s: None,
            min_resources: Default::default(),
            created_ms: self.now_ms,
            gpu_request: Ok(Default::default()),
        });
    }

    fn delete_pod(&mut self, name: &str) {
        self.pods.retain(|p| p.name != name);
    }

    /// One cycle `step_ms` after the last; the actions are returned and
    /// not applied.
    fn cycle_only(&mut self) -> Vec<Action> {
        self.now_ms += self.step_ms;
        let input = Inputs {
            nodes: &self.nodes,
            pods: &self.pods,
            groups: &self.groups,
            vcs: &self.vcs,
            now_ms: self.now_ms,
            fresh: self.fresh,
            usage: &self.usage,
        };
        let actions = self.host.cycle(&input).unwrap();
        self.log.extend(actions.iter().cloned());
        actions
    }

    /// One cycle whose Bindings all go through and show in the cache, and
    /// whose evictions remove the pods.
    fn cycle(&mut self) -> Vec<Action> {
        self.cycle_with(|_| BindOutcome::Bound, true)
    }

    /// One cycle; each Binding's outcome as `outcome` says, applied to the
    /// cache if `apply`.
    fn cycle_with(
        &mut self,
        outcome: impl Fn(&PodBind) -> BindOutcome,
        apply: bool,
    ) -> Vec<Action> {
        let actions = self.cycle_only();
        for a in &actions {
            match a {
                Action::Bind(order) => {
                    let outcomes: Vec<BindOutcome> = order.binds.iter().map(&outcome).collect();
                    for (b, o) in order.binds.iter().zip(&outcomes) {
                        if apply && !matches!(o, BindOutcome::Refused(_)) {
                            self.apply_bind(b);
                        }
                    }
                    self.host.on_bound(order, &outcomes, self.now_ms);
                }
                Action::Evict { pods, .. } => {
                    for (_, name) in pods {
                        self.delete_pod(name);
                    }
                }
                _ => {}
            }
        }
        actions
    }

    fn apply_bind(&mut self, b: &PodBind) {
        if let Some(p) = self
            .pods
            .iter_mut()
            .find(|p| p.name == b.pod && p.uid == b.uid && p.node.is_none())
        {
            p.node = Some(b.node.clone());
            p.phase = Phase::Running;
            p.gpu_indices = b
                .annotations
                .get(GPU_INDICES_ANNOTATION)
                .and_then(|t| parse_indices(t));
            p.plan = b.annotations.get(GANG_PLAN_ANNOTATION).cloned();
        }
    }

    fn bound(&self, name: &str) -> Option<&str> {
        self.pods
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.node.as_deref())
    }

    fn binds(actions: &[Action]) -> usize {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Bind(o) => Some(o.binds.len()),
                _ => None,
            })
            .sum()
    }

    fn evictions(&self) -> usize {
        self.log
            .iter()
            .filter(|a| matches!(a, Action::Evict { .. }))
            .count()
    }

    /// The scheduler's free GPUs.
    fn free(&self) -> u32 {
        self.host.scheduler().unwrap().state().free_gpus()
    }

    /// The last reason written for gang `name` (a PodGroup or a pod).
    fn reason(&self, name: &str) -> Option<String> {
        self.log.iter().rev().find_map(|a| match a {
            Action::Status {
                gang, condition, ..
            } if gang.name() == name => Some(condition.1.clone()),
            _ => None,
        })
    }

    /// The last note (the condition's message) written for gang `name`.
    fn note(&self, name: &str) -> Option<String> {
        self.log.iter().rev().find_map(|a| match a {
            Action::Status {
                gang, condition, ..
            } if gang.name() == name => Some(condition.2.clone()),
            _ => None,
        })
    }

    /// No GPU index of a node held by two pods that hold GPUs.
    fn check_no_gpu_twice(&self) {
        let mut owner: BTreeMap<(String, u32), String> = BTreeMap::new();
        for p in self.pods.iter().filter(|p| p.holds()) {
            for g in p.gpu_indices.iter().flatten() {
                let node = p.node.clone().unwrap();
                if let Some(o) = owner.insert((node.clone(), *g), p.name.clone()) {
                    panic!("GPU {g} of {node} held by {o} and {}", p.name);
                }
            }
        }
    }
}

fn fallbacks() -> PolicySet {
    PolicySet::fallbacks()
}

fn philly() -> PolicySet {
    gangway_catalog::preset("philly")
        .unwrap()
        .build_native()
        .unwrap()
}

/// The case: a 64-GPU gang waits while a running one holds the
/// cluster; deleting the running one (pod by pod) lets it bind at the
/// next cycle.
#[test]
fn deleting_a_running_gang_frees_its_gpus_at_the_next_cycle() {
    let mut f = Fake::new(8, fallbacks());
    f.group("a", 8);
    for i in 0..8 {
        f.pod(&format!("a-{i}"), Some("a"), 8);
    }
    f.cycle();
    f.cycle();
    assert!(f.bound("a-0").is_some());
    assert_eq!(f.free(), 0);
    f.group("b", 8);
    for i in 0..8 {
        f.pod(&format!("b-{i}"), Some("b"), 8);
    }
    f.cycle();
    assert!(f.bound("b-0").is_none());
    // The user cancels: every pod of a deleted (the PodGroup stays).
    for i in 0..8 {
        f.delete_pod(&format!("a-{i}"));
    }
    let actions = f.cycle();
    assert_eq!(Fake::binds(&actions), 8, "b binds at the next cycle");
    f.cycle();
    assert!(f.bound("b-7").is_some());
    f.check_no_gpu_twice();
    // Nothing of a was ever started again.
    for _ in 0..5 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
    f.host.scheduler().unwrap().check_invariants().unwrap();
}

/// A single pod deleted while it runs, and a PodGroup deleted with its
/// pods: their GPUs come back, nothing is bound twice.
#[test]
fn a_deleted_pod_or_podgroup_gives_its_gpus_back() {
    let mut f = Fake::new(1, fallbacks());
    f.pod("solo", None, 8);
    f.cycle();
    f.cycle();
    assert_eq!(f.free(), 0);
    f.delete_pod("solo");
    f.cycle();
    assert_eq!(f.free(), 8);
    f.group("g", 2);
    f.pod("g-0", Some("g"), 4);
    f.pod("g-1", Some("g"), 4);
    f.cycle();
    f.cycle();
    assert_eq!(f.free(), 0);
    f.groups.clear();
    f.delete_pod("g-0");
    f.delete_pod("g-1");
    f.cycle();
    assert_eq!(f.free(), 8);
    for _ in 0..3 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
}

/// A pod of a running gang that ends gives its GPUs back at the next
/// cycle while the rest runs on (a gang waiting for them binds there); the
/// gang ends, passed, when its last pod ends.
#[test]
fn a_pod_that_ends_frees_its_share_of_a_running_gang() {
    let mut f = Fake::new(1, fallbacks());
    f.group("g", 2);
    f.pod("g-0", Some("g"), 4);
    f.pod("g-1", Some("g"), 4);
    f.cycle();
    f.cycle();
    f.pod("w", None, 4);
    for _ in 0..2 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
    f.pods[0].phase = Phase::Succeeded;
    assert_eq!(Fake::binds(&f.cycle()), 1, "w binds on g-0's GPUs");
    assert_eq!(f.bound("w"), Some("n0"));
    assert_eq!(f.evictions(), 0);
    assert_eq!(f.host.stats.gangs_finished, 0);
    f.check_no_gpu_twice();
    f.pods[1].phase = Phase::Succeeded;
    f.cycle();
    assert_eq!(f.free(), 4);
    assert_eq!(f.host.stats.gangs_finished, 1);
    f.check_no_gpu_twice();
}

/// A gang partly deleted while it runs is ended whole: its other pods are
/// evicted, and its GPUs come back once they are gone.
#[test]
fn a_gang_partly_deleted_is_ended_whole() {
    let mut f = Fake::new(2, fallbacks());
    f.group("g", 2);
    f.pod("g-0", Some("g"), 8);
    f.pod("g-1", Some("g"), 8);
    f.cycle();
    f.cycle();
    f.delete_pod("g-0");
    f.cycle();
    assert!(f.pods.iter().all(|p| p.name != "g-1"), "g-1 evicted");
    f.cycle();
    assert_eq!(f.free(), 16);
}

/// A Binding whose reply was lost holds its GPUs while the cache does not
/// show it: nothing else is bound there, and reading the pod resolves it.
#[test]
fn a_lost_binding_reply_is_never_double_booked() {
    let mut f = Fake::new(1, fallbacks());
    f.pod("a", None, 8);
    // The API server applied the Binding but the reply was lost, and the
    // cache is stale: it still shows the pod unbound.
    let actions = f.cycle_with(|_| BindOutcome::Unknown("connection reset".into()), false);
    assert_eq!(Fake::binds(&actions), 1);
    f.pod("b", None, 8);
    for _ in 0..5 {
        let actions = f.cycle_only();
        assert_eq!(Fake::binds(&actions), 0, "{actions:?}");
    }
    // A read finds it bound where we asked: still held, then the cache
    // shows it.
    let orders = f.host.binds_to_read(f.now_ms + 5_000);
    assert_eq!(orders.len(), 1);
    f.host
        .on_read(&orders[0], &ReadOutcome::BoundTo("n0".into()), f.now_ms);
    assert_eq!(Fake::binds(&f.cycle_only()), 0);
    let b = PodBind {
        namespace: "ns".into(),
        pod: "a".into(),
        uid: "u1".into(),
        node: "n0".into(),
        gpus: (0..8).collect(),
        annotations: [(
            GPU_INDICES_ANNOTATION.to_string(),
            "0,1,2,3,4,5,6,7".to_string(),
        )]
        .into_iter()
        .collect(),
    };
    f.apply_bind(&b);
    for _ in 0..3 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
    f.check_no_gpu_twice();
    // Pod a ends: b binds.
    f.pods[0].phase = Phase::Succeeded;
    assert_eq!(Fake::binds(&f.cycle()), 1);
    f.check_no_gpu_twice();
}

/// A lost reply whose Binding did not happen: the read says so and the
/// gang is placed again.
#[test]
fn a_lost_binding_that_did_not_happen_is_placed_again() {
    let mut f = Fake::new(1, fallbacks());
    f.pod("a", None, 8);
    f.cycle_with(|_| BindOutcome::Unknown("timeout".into()), false);
    let orders = f.host.binds_to_read(f.now_ms + 5_000);
    f.host.on_read(&orders[0], &ReadOutcome::Unbound, f.now_ms);
    let mut bound = 0;
    for _ in 0..3 {
        bound += Fake::binds(&f.cycle());
    }
    assert_eq!(bound, 1);
    assert_eq!(f.bound("a"), Some("n0"));
}

/// A refused Binding breaks the gang: the pods bound are evicted, and it
/// is placed again only after a back-off of 1 s, doubling with each
/// refusal in a row.
#[test]
fn a_refused_binding_evicts_the_gang_and_backs_off() {
    let mut f = Fake::new(2, fallbacks());
    f.step_ms = 200;
    f.group("g", 2);
    f.pod("g-0", Some("g"), 8);
    f.pod("g-1", Some("g"), 8);
    let refuse_one = |b: &PodBind| {
        if b.pod == "g-1" {
            BindOutcome::Refused("the pod is gone".into())
        } else {
            BindOutcome::Bound
        }
    };
    f.cycle_with(refuse_one, true);
    let refused_at = f.now_ms;
    f.cycle();
    assert!(f.pods.iter().all(|p| p.name != "g-0"), "g-0 evicted");
    assert_eq!(f.evictions(), 1);
    // Its pods come back (a controller): the gang waits out its back-off,
    // 1 s, and is refused again.
    f.pod("g-0", Some("g"), 8);
    let actions = f.cycle_only();
    assert_eq!(Fake::binds(&actions), 0);
    assert_eq!(f.reason("g").as_deref(), Some("BindBackoff"));
    while Fake::binds(&f.cycle_with(refuse_one, true)) == 0 {
        assert!(f.now_ms < refused_at + 5_000, "never placed again");
    }
    assert_eq!(f.now_ms - refused_at, 1_000, "the first back-off");
    let refused_at = f.now_ms;
    f.cycle();
    f.pod("g-0", Some("g"), 8);
    // The second refusal in a row: 2 s.
    while Fake::binds(&f.cycle()) == 0 {
        assert!(f.now_ms < refused_at + 10_000, "never placed again");
    }
    assert_eq!(f.now_ms - refused_at, 2_000, "the second back-off");
    assert!(f.bound("g-0").is_some() && f.bound("g-1").is_some());
}

/// The back-off after refused Bindings: 1 s, doubling, at most 60 s.
#[test]
fn the_bind_back_off_starts_at_one_second() {
    let waits: Vec<u64> = (1..=8).map(super::bind_backoff_ms).collect();
    assert_eq!(
        waits,
        [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
    );
    assert_eq!(super::bind_backoff_ms(u32::MAX), 60_000);
}

/// A node NotReady for less than its grace evicts nothing; past it, its
/// gangs are evicted.
#[test]
fn not_ready_is_waited_out() {
    let mut f = Fake::new(2, fallbacks());
    f.pod("a", None, 8);
    f.cycle();
    f.cycle();
    let node = f.bound("a").unwrap().to_string();
    let at = f.nodes.iter().position(|n| n.name == node).unwrap();
    f.nodes[at].health = Health::Down;
    for _ in 0..20 {
        f.cycle();
    }
    assert_eq!(f.evictions(), 0);
    f.nodes[at].health = Health::Up;
    f.cycle();
    f.nodes[at].health = Health::Down;
    for _ in 0..29 {
        f.cycle();
    }
    assert_eq!(f.evictions(), 0, "the grace starts again at each NotReady");
    for _ in 0..3 {
        f.cycle();
    }
    assert_eq!(f.evictions(), 1);
}

/// A GPU count that reads 0 for a few seconds is not a deletion.
#[test]
fn a_gpu_count_blip_evicts_nothing() {
    let mut f = Fake::new(2, fallbacks());
    f.pod("a", None, 8);
    f.cycle();
    f.cycle();
    let node = f.bound("a").unwrap().to_string();
    let at = f.nodes.iter().position(|n| n.name == node).unwrap();
    f.nodes[at].gpus = 0;
    for _ in 0..3 {
        f.cycle();
    }
    f.nodes[at].gpus = 8;
    for _ in 0..3 {
        f.cycle();
    }
    assert_eq!(f.evictions(), 0);
    assert_eq!(f.host.stats.topology_rebuilds, 1);
}

/// Pods created before their PodGroup wait for it (never placed as gangs
/// of one); a PodGroup deleted with pods pending leaves them pending.
#[test]
fn a_gang_is_whole_whatever_the_order() {
    let mut f = Fake::new(4, fallbacks());
    f.pod("g-0", Some("g"), 8);
    f.pod("g-1", Some("g"), 8);
    for _ in 0..3 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
    f.pod("g-2", Some("g"), 8);
    f.pod("g-3", Some("g"), 8);
    f.group("g", 4);
    let actions = f.cycle();
    assert_eq!(Fake::binds(&actions), 4);
    // A PodGroup deleted while 3 of its 4 pods wait.
    f.group("h", 4);
    for i in 0..3 {
        f.pod(&format!("h-{i}"), Some("h"), 1);
    }
    f.cycle();
    f.groups.retain(|g| g.name != "h");
    for _ in 0..3 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
    assert_eq!(f.reason("h").as_deref(), Some("WaitingForPodGroup"));
}

/// Under the philly preset, a gang under its quota takes back GPUs a
/// borrower holds: the beneficiary waits for the preempted pods to leave
/// before it binds, so no GPU is ever held twice. Young gangs are spared.
#[test]
fn a_preemption_beneficiary_waits_for_its_victims() {
    let mut f = Fake::new(1, philly());
    f.host.set_min_run_s(60);
    f.vcs = vc_table(&[("ns", "0"), ("other", "8")]);
    f.pod("borrower", None, 8);
    for _ in 0..30 {
        f.cycle();
    }
    assert!(f.bound("borrower").is_some());
    f.uid += 1;
    f.pods.push(PodInfo {
        namespace: "other".into(),
        name: "owner".into(),
        uid: format!("u{}", f.uid),
        ours: true,
        node: None,
        phase: Phase::Pending,
        terminating: false,
        gpus: Ok(8),
        gpus_annotation: None,
        group: None,
        vc_label: None,
        created_ms: f.now_ms,
        gpu_indices: None,
        plan: None,
        needs: Default::default(),
    });
    // Young: spared for the first minute of its run.
    for _ in 0..20 {
        f.cycle_only();
    }
    assert_eq!(f.evictions(), 0);
    // Then taken back; the owner is not bound while the borrower's pod is
    // there (being deleted: it still holds its GPUs).
    let mut evicted = false;
    for _ in 0..120 {
        let actions = f.cycle_only();
        for a in &actions {
            if let Action::Evict { .. } = a {
                evicted = true;
                let p = f.pods.iter_mut().find(|p| p.name == "borrower").unwrap();
                p.terminating = true;
            }
            assert_eq!(
                Fake::binds(std::slice::from_ref(a)),
                0,
                "bound while the victim holds"
            );
        }
        if evicted {
            break;
        }
    }
    assert!(evicted);
    for _ in 0..3 {
        assert_eq!(Fake::binds(&f.cycle_only()), 0);
    }
    assert_eq!(f.reason("owner").as_deref(), Some("WaitingForEvictions"));
    f.delete_pod("borrower");
    assert_eq!(Fake::binds(&f.cycle()), 1);
    f.check_no_gpu_twice();
}

/// A gang a previous scheduler bound in part (its plan on the bound pod)
/// holds its whole plan and is finished on it.
#[test]
fn a_gang_bound_in_part_is_finished_on_its_plan() {
    let mut f = Fake::new(2, fallbacks());
    f.group("half", 2);
    f.pod("half-0", Some("half"), 4);
    f.pod("half-1", Some("half"), 4);
    let plan = "half-0=n1:0,1,2,3;half-1=n1:4,5,6,7";
    let p = &mut f.pods[0];
    p.node = Some("n1".into());
    p.phase = Phase::Running;
    p.gpu_indices = Some(vec![0, 1, 2, 3]);
    p.plan = Some(plan.into());
    f.pod("other", None, 8);
    let mut binds = Vec::new();
    for _ in 0..8 {
        for a in f.cycle() {
            if let Action::Bind(o) = a {
                binds.extend(o.binds.into_iter().map(|b| (b.pod, b.node, b.gpus)));
            }
        }
    }
    assert!(
        binds.contains(&("half-1".into(), "n1".into(), vec![4, 5, 6, 7])),
        "{binds:?}"
    );
    assert!(
        binds.contains(&("other".into(), "n0".into(), (0..8).collect())),
        "{binds:?}"
    );
    assert_eq!(f.evictions(), 0);
    f.check_no_gpu_twice();
}

/// After a watch failed or re-listed (the caches not fresh), a cycle
/// reconciles the books but places nothing and rolls no gang bound in
/// part forward; once the caches are fresh it does both.
#[test]
fn nothing_is_placed_while_the_caches_catch_up() {
    let mut f = Fake::new(2, fallbacks());
    f.group("half", 2);
    f.pod("half-0", Some("half"), 4);
    f.pod("half-1", Some("half"), 4);
    let p = &mut f.pods[0];
    p.node = Some("n1".into());
    p.phase = Phase::Running;
    p.gpu_indices = Some(vec![0, 1, 2, 3]);
    p.plan = Some("half-0=n1:0,1,2,3;half-1=n1:4,5,6,7".into());
    f.pod("other", None, 8);
    f.fresh = false;
    for _ in 0..10 {
        let actions = f.cycle();
        assert_eq!(Fake::binds(&actions), 0, "{actions:?}");
    }
    // The books hold what the cluster holds meanwhile: the gang bound in
    // part has its whole plan on n1.
    assert_eq!(f.free(), 8);
    assert_eq!((f.bound("half-1"), f.bound("other")), (None, None));
    f.fresh = true;
    let mut binds = 0;
    for _ in 0..3 {
        binds += Fake::binds(&f.cycle());
    }
    assert_eq!(binds, 2);
    assert_eq!(
        (f.bound("half-1"), f.bound("other")),
        (Some("n1"), Some("n0"))
    );
    assert_eq!(f.evictions(), 0);
    f.check_no_gpu_twice();
}

/// A node's facts for the fit tests: labels, maybe a taint, 8 CPUs.
fn node_facts(labels: &[(&str, &str)], taint: bool) -> std::sync::Arc<crate::fit::NodeFacts> {
    let taints = if taint {
        vec![("dedicated".into(), "infer".into(), "NoSchedule".into())]
    } else {
        Vec::new()
    };
    std::sync::Arc::new(crate::fit::NodeFacts {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        taints,
        allocatable: [("cpu".to_string(), 8_000), ("pods".to_string(), 110_000)]
            .into_iter()
            .collect(),
    })
}

/// Pods go only where they fit as kube-scheduler's filters say: a node
/// tainted against them, one whose CPU others use, one without the label
/// their selector names are left out; a gang that fits nowhere waits as
/// Unschedulable, with kube-scheduler's count of why.
#[test]
fn pods_are_bound_only_where_they_fit() {
    use crate::fit::{PodNeeds, Tolerates};
    let facts = node_facts;
    use std::sync::Arc;
    let mut f = Fake::new(4, fallbacks());
    f.nodes[0].facts = facts(&[("pool", "train")], true);
    f.nodes[1].facts = facts(&[("pool", "train")], false);
    f.nodes[2].facts = facts(&[("pool", "other")], false);
    f.nodes[3].facts = facts(&[("pool", "train")], false);
    // Another scheduler's pod uses 7 of n3's 8 CPUs.
    f.usage.insert(
        "n3".into(),
        [("cpu".to_string(), 7_000)].into_iter().collect(),
    );
    let needs = Arc::new(PodNeeds {
        requests: vec![("cpu".into(), 2_000), ("pods".into(), 1_000)],
        node_selector: vec![("pool".into(), "train".into())],
        ..PodNeeds::default()
    });
    f.pod("a", None, 1);
    f.pods[0].needs = Arc::clone(&needs);
    f.cycle();
    f.cycle();
    assert_eq!(f.bound("a"), Some("n1"));
    // Fits nowhere: a toleration it lacks elsewhere, n1 busy with 4 pods.
    for i in 0..3 {
        f.pod(&format!("fill{i}"), None, 1);
        let p = f.pods.last_mut().unwrap();
        p.needs = Arc::clone(&needs);
    }
    for _ in 0..3 {
        f.cycle();
    }
    f.usage.insert(
        "n1".into(),
        [("cpu".to_string(), 8_000)].into_iter().collect(),
    );
    f.pod("late", None, 1);
    f.pods.last_mut().unwrap().needs = Arc::clone(&needs);
    for _ in 0..3 {
        f.cycle();
    }
    assert_eq!(f.bound("late"), None);
    assert_eq!(f.reason("late").as_deref(), Some("Unschedulable"));
    let note = f.note("late").unwrap();
    assert!(note.contains("0/4 nodes are available"), "{note}");
    assert!(
        note.contains("1 node(s) had untolerated taint {dedicated=infer:NoSchedule}"),
        "{note}"
    );
    assert!(note.contains("2 Insufficient cpu"), "{note}");
    // Tolerating the taint, it goes to n0.
    let mut tolerant = (*needs).clone();
    tolerant.tolerations.push(Tolerates {
        key: Some("dedicated".into()),
        exists: true,
        value: String::new(),
        effect: None,
    });
    f.pods.last_mut().unwrap().needs = Arc::new(tolerant);
    f.cycle();
    f.cycle();
    assert_eq!(f.bound("late"), Some("n0"));
}

/// A PodGroup's scheduleTimeoutSeconds: a gang still short of its pods
/// after it is reported ScheduleTimeout (and keeps waiting); its
/// minResources keep it waiting while the cluster has less free.
#[test]
fn podgroup_timeout_and_min_resources() {
    let mut f = Fake::new(1, fallbacks());
    f.group("slow", 2);
    f.groups[0].schedule_timeout_s = Some(5);
    f.pod("slow-0", Some("slow"), 4);
    f.cycle();
    assert_eq!(f.reason("slow").as_deref(), Some("WaitingForPods"));
    for _ in 0..6 {
        f.cycle();
    }
    assert_eq!(f.reason("slow").as_deref(), Some("ScheduleTimeout"));
    f.pod("slow-1", Some("slow"), 4);
    assert_eq!(
        Fake::binds(&f.cycle()),
        2,
        "it binds whole once its pods come"
    );
    f.group("big", 1);
    f.groups[1].min_resources = [("nvidia.com/gpu".to_string(), 16_000)]
        .into_iter()
        .collect();
    f.pod("big-0", Some("big"), 8);
    f.delete_pod("slow-0");
    f.delete_pod("slow-1");
    for _ in 0..3 {
        assert_eq!(Fake::binds(&f.cycle()), 0);
    }
    assert_eq!(f.reason("big").as_deref(), Some("MinResources"));
}

/// `Fake` nodes n0..n3 whose GPUs are typed by label: n0 and n1 A100s of
/// 80 GB, n2 and n3 V100s of 16 GB; the host reads the type label.
fn typed_cluster() -> Fake {
    typed_cluster_with(fallbacks())
}

/// [`typed_cluster`] with `policies`.
fn typed_cluster_with(policies: PolicySet) -> Fake {
    let mut f = Fake::new(4, policies);
    f.host.set_gpu_type_label(TYPE_LABEL);
    for (i, n) in f.nodes.iter_mut().enumerate() {
        let (t, gb) = if i < 2 { ("A100", 80) } else { ("V100", 16) };
        n.gpu_type = Some((t.into(), gb));
        let mut facts = (*n.facts).clone();
        facts.labels.insert(TYPE_LABEL.into(), t.into());
        n.facts = std::sync::Arc::new(facts);
    }
    f
}

const TYPE_LABEL: &str = "nvidia.com/gpu.product";

/// Pod `name` of `f` selects nodes of GPU type `t`.
fn select_type(f: &mut Fake, name: &str, t: &str) {
    let p = f.pods.iter_mut().find(|p| p.name == name).unwrap();
    let mut needs = (*p.needs).clone();
    needs.node_selector = vec![(TYPE_LABEL.into(), t.into())];
    p.needs = std::sync::Arc::new(needs);
}

/// A pod whose nodeSelector names a type runs on that type; a gang that
/// asks nothing is never split across two types, even when one node of
/// each is free.
#[test]
fn a_gang_runs_on_one_gpu_type_and_the_type_its_pods_select() {
    let mut f = typed_cluster();
    f.pod("v", None, 8);
    select_type(&mut f, "v", "V100");
    f.pod("a", None, 8);
    select_type(&mut f, "a", "A100");
    f.cycle();
    f.cycle();
    assert!(
        matches!(f.bound("v"), Some("n2" | "n3")),
        "{:?}",
        f.bound("v")
    );
    assert!(
        matches!(f.bound("a"), Some("n0" | "n1")),
        "{:?}",
        f.bound("a")
    );
    // One A100 node and one V100 node free: 16 GPUs, but not of one type.
    f.group("any", 2);
    f.pod("any-0", Some("any"), 8);
    f.pod("any-1", Some("any"), 8);
    f.cycle();
    f.cycle();
    assert_eq!((f.bound("any-0"), f.bound("any-1")), (None, None));
    f.check_no_gpu_twice();
    // The A100 pod ends: the gang takes both A100 nodes.
    f.delete_pod("a");
    f.cycle();
    f.cycle();
    f.cycle();
    let mut nodes = [f.bound("any-0"), f.bound("any-1")];
    nodes.sort();
    assert_eq!(nodes, [Some("n0"), Some("n1")]);
}

/// A PodGroup's annotations name types and a memory minimum; a request no
/// node can satisfy waits with its reason, and a bad one is named.
#[test]
fn a_podgroup_asks_for_types_and_memory_by_annotation() {
    let mut f = typed_cluster();
    f.group("big", 1);
    f.groups.last_mut().unwrap().gpu_request = Ok(gangway_core::GpuRequest {
        types: Vec::new(),
        min_memory_gb: 40,
    });
    f.pod("big-0", Some("big"), 8);
    f.group("h", 1);
    f.groups.last_mut().unwrap().gpu_request = Ok(gangway_core::GpuRequest::types(["H100"]));
    f.pod("h-0", Some("h"), 8);
    f.cycle();
    f.cycle();
    assert!(matches!(f.bound("big-0"), Some("n0" | "n1")));
    assert_eq!(f.bound("h-0"), None);
    assert_eq!(f.reason("h").as_deref(), Some("NoGpuType"));
    let note = f.note("h").unwrap();
    assert!(
        note.contains("H100") && note.contains("A100, V100"),
        "{note}"
    );
}

/// Pod `name` of `f` moves to namespace (so VC) `ns`.
fn move_to(f: &mut Fake, name: &str, ns: &str) {
    let p = f.pods.iter_mut().find(|p| p.name == name).unwrap();
    p.namespace = ns.into();
}

/// A VC with quotas per GPU type runs only on the types it names, within
/// nominal plus borrowing limit, and a gang that no type has room for says
/// so (`TypeQuota`); a VC without them is unaffected. A changed table and
/// a rebuilt topology apply the quotas again. Under philly, whose VCs
/// borrow idle GPUs.
#[test]
fn quotas_per_gpu_type_cap_a_vc_and_say_why_a_gang_waits() {
    let mut f = typed_cluster_with(philly());
    f.vcs = vc_table(&[("ns", "A100=8+0,H100=4"), ("other", "none")]);
    for name in ["a", "b", "c"] {
        f.pod(name, None, 4);
    }
    for _ in 0..3 {
        f.cycle();
    }
    // Then a gang of 16 GPUs of VC other: only V100s have them free.
    f.group("o", 2);
    f.groups.last_mut().unwrap().namespace = "other".into();
    for name in ["o-0", "o-1"] {
        f.pod(name, Some("o"), 8);
        move_to(&mut f, name, "other");
    }
    for _ in 0..3 {
        f.cycle();
    }
    for name in ["a", "b"] {
        assert!(
            matches!(f.bound(name), Some("n0" | "n1")),
            "{name} {:?} {:?} {:?}",
            f.bound(name),
            f.reason(name),
            f.note(name)
        );
    }
    assert_eq!(f.bound("c"), None);
    for name in ["o-0", "o-1"] {
        assert!(matches!(f.bound(name), Some("n2" | "n3")), "{name}");
    }
    assert_eq!(f.reason("c").as_deref(), Some("TypeQuota"));
    let note = f.note("c").unwrap();
    for says in [
        "virtual cluster ns",
        "A100: 8 of its cap 8 held",
        "V100: not in its quotas",
    ] {
        assert!(note.contains(says), "{note}");
    }
    // A borrowing limit of 4 more: c runs on an A100 node too.
    f.vcs = vc_table(&[("ns", "A100=8+4"), ("other", "none")]);
    f.cycle();
    f.cycle();
    assert!(
        matches!(f.bound("c"), Some("n0" | "n1")),
        "{:?} {:?}",
        f.reason("c"),
        f.note("c")
    );
    // A node joins: the topology is rebuilt and the caps hold again.
    let mut n4 = f.nodes[0].clone();
    n4.name = "n4".into();
    f.nodes.push(n4);
    f.pod("d", None, 4);
    for _ in 0..3 {
        f.cycle();
    }
    assert_eq!(f.host.stats.topology_rebuilds, 2);
    assert_eq!(f.bound("d"), None);
    assert_eq!(f.reason("d").as_deref(), Some("TypeQuota"));
    f.check_no_gpu_twice();
}
