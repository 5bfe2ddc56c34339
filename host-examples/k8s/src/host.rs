//! The host: Gangway's scheduler kept in line with the cluster, one cycle
//! at a time. A cycle takes what the API server's objects say
//! ([`Inputs`], from the watch caches) and returns what to do
//! ([`Action`]s: bind, evict, report); it does no I/O itself, so the same
//! inputs give the same actions and it is tested without a cluster.
//!
//! A cycle:
//! 1. rebuilds the topology if the GPU nodes changed (a deleted node's
//!    gangs are evicted whole first);
//! 2. groups our pods into gangs ([`gangs`](super::gangs)); a finished
//!    gang ends its attempt, a complete one is submitted, one that is no
//!    longer complete (or changed) leaves the queue;
//! 3. builds the engine's truth (our bound gangs where their pods' plans
//!    put them, other schedulers' GPU pods as foreign load, node health)
//!    and reconciles the scheduler with it: a node gone NotReady interrupts
//!    its gangs, which are evicted whole;
//! 4. finishes gangs a previous scheduler began binding (their plan is on
//!    their bound pods);
//! 5. runs a round: starts become Bindings of every pod, preempted and
//!    migrated gangs are evicted whole, waiting gangs get their reason.

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::policy::PolicySet;
use gangway_core::reconcile::{Difference, EngineTruth};
use gangway_core::{
    AttemptEnd, FailureClass, JobId, JobSpec, Placement, PlacementStrategy, Scheduler, ServerId,
    VcId, WaitReason,
};

use super::gangs::{self, GangKey, GangView, Limits};
use super::objects::{
    GANG_ANNOTATION, GANG_PLAN_ANNOTATION, GPU_INDICES_ANNOTATION, GroupInfo, NodeInfo, PodInfo,
    indices_text,
};
use super::plan::{self, Plan};
use super::report::{self, Action, EventOrder, PodBind, Stats, Target};
use super::topology::{self, ClusterMap};
use super::{GangProblem, K8sError};

/// Gangway ids of foreign pods (other schedulers' GPU pods): this bit
/// plus a counter.
pub const FOREIGN_BIT: u64 = 1 << 62;
/// The virtual cluster of foreign load.
pub const FOREIGN_VC: &str = "(foreign)";
/// How long a gang we bound counts as bound before the cache shows it.
const ASSUME_MS: u64 = 30_000;
/// How long before a roll-forward bind of the same pods is tried again.
const ROLL_FORWARD_MS: u64 = 5_000;

/// The virtual clusters: `None` admits every VC without a quota;
/// otherwise each listed VC's quota in GPUs (`None`: no quota).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VcTable {
    /// The listed VCs, if a list exists.
    pub listed: Option<BTreeMap<String, Option<u32>>>,
    /// Where the list lives, for messages (`namespace/name`).
    pub source: String,
}

/// What the API says, for one cycle.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// Every node.
    pub nodes: &'a [NodeInfo],
    /// Every pod (ours and others').
    pub pods: &'a [PodInfo],
    /// Every PodGroup.
    pub groups: &'a [GroupInfo],
    /// The virtual clusters.
    pub vcs: &'a VcTable,
    /// Unix milliseconds now.
    pub now_ms: u64,
}

/// What the host remembers of a gang between cycles.
#[derive(Clone, Debug, Default)]
struct Entry {
    /// Its Gangway job, while submitted.
    job: Option<JobId>,
    /// GPUs it was submitted with.
    gpus: u32,
    /// The plan we bound it with, and when (until the cache shows it).
    bound: Option<(Plan, u64)>,
    /// When its pods were last asked to bind by a roll-forward.
    rolled_ms: u64,
    /// Its pods are being evicted: not placed until they are gone.
    evicting: bool,
    /// The last reason written to its status and Events.
    reason: Option<String>,
    /// Problems already reported (each once).
    reported: BTreeSet<String>,
}

/// The host (see the module docs).
pub struct Host {
    levels: Vec<String>,
    view_window: usize,
    strategy: PlacementStrategy,
    /// The policies while there is no scheduler (no GPU node yet).
    parked: Option<PolicySet>,
    sched: Option<Scheduler>,
    map: Option<ClusterMap>,
    vcs: VcTable,
    vc_ids: BTreeMap<String, VcId>,
    gangs: BTreeMap<GangKey, Entry>,
    by_job: BTreeMap<JobId, GangKey>,
    /// Foreign pods by uid: id, node, GPUs taken for them.
    foreign: BTreeMap<String, (JobId, String, u64)>,
    next_job: u64,
    next_foreign: u64,
    last_now: u64,
    /// Actions decided between cycles (a failed binding's eviction).
    pending_out: Vec<Action>,
    /// Counters for the metrics endpoint.
    pub stats: Stats,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("gangs", &self.gangs.len())
            .finish_non_exhaustive()
    }
}

/// The PascalCase name of a wait reason (a condition's and Event's reason).
pub fn reason_name(r: WaitReason) -> &'static str {
    match r {
        WaitReason::FairShare => "FairShare",
        WaitReason::Fragmentation => "Fragmentation",
        WaitReason::Reserved => "Reserved",
        WaitReason::HeldByPolicy => "HeldByPolicy",
        WaitReason::NoCapacity => "NoCapacity",
        WaitReason::Queued => "Queued",
        WaitReason::RetryDelay => "RetryDelay",
    }
}

/// What a wait reason means, in a sentence (the words of `gangway-slurm why`).
pub fn explain(r: WaitReason) -> &'static str {
    match r {
        WaitReason::FairShare => {
            "its virtual cluster is at or over its share (quota or fair share)"
        }
        WaitReason::Fragmentation => {
            "enough GPUs are free, but not close enough together for its locality limit"
        }
        WaitReason::Reserved => "the GPUs it could use are held for a reserved larger job",
        WaitReason::HeldByPolicy => "a blocked job ahead of it holds the queue (gang policy)",
        WaitReason::NoCapacity => "fewer GPUs are free in the whole cluster than it needs",
        WaitReason::Queued => "it waits behind earlier gangs of its virtual cluster",
        WaitReason::RetryDelay => "it waits out the delay its retry policy chose",
    }
}

impl Host {
    /// A host over node labels `levels`, with the policy set (and the
    /// placement strategy) the scheduler will use.
    pub fn new(levels: Vec<String>, policies: PolicySet, strategy: PlacementStrategy) -> Host {
        Host {
            levels,
            view_window: Scheduler::DEFAULT_VIEW_WINDOW,
            strategy,
            parked: Some(policies),
            sched: None,
            map: None,
            vcs: VcTable::default(),
            vc_ids: BTreeMap::new(),
            gangs: BTreeMap::new(),
            by_job: BTreeMap::new(),
            foreign: BTreeMap::new(),
            next_job: 1,
            next_foreign: 1,
            last_now: 0,
            pending_out: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Sets how many pending gangs of each VC a round considers (0: all).
    pub fn set_view_window(&mut self, jobs_per_vc: usize) {
        self.view_window = jobs_per_vc;
        if let Some(s) = self.sched.as_mut() {
            s.set_view_window(jobs_per_vc);
        }
    }

    /// The scheduler, once there are GPU nodes.
    pub fn scheduler(&self) -> Option<&Scheduler> {
        self.sched.as_ref()
    }

    /// The cluster map, once there are GPU nodes.
    pub fn map(&self) -> Option<&ClusterMap> {
        self.map.as_ref()
    }

    fn now_s(&mut self, now_ms: u64) -> u64 {
        self.last_now = self.last_now.max(now_ms / 1000);
        self.last_now
    }

    /// One cycle (see the module docs): the actions to carry out, in order.
    pub fn cycle(&mut self, input: &Inputs<'_>) -> Result<Vec<Action>, K8sError> {
        let now = self.now_s(input.now_ms);
        let mut out = std::mem::take(&mut self.pending_out);
        self.sync_topology(input, &mut out)?;
        self.sync_vcs(input.vcs);
        let limits = self.limits();
        let vc_label_of = |p: &PodInfo| p.vc_label.clone().unwrap_or_else(|| p.namespace.clone());
        let vcs = self.vcs.clone();
        let views = gangs::collect(input.pods, input.groups, limits, vc_label_of, |vc| {
            known_vc(&vcs, vc)
        });
        self.forget_gone(&views);
        if self.sched.is_none() {
            for view in views.values().filter(|v| !v.pods.is_empty()) {
                self.set_reason(view, "NoGPUNodes", "no node has GPUs yet", &mut out);
            }
            return Ok(out);
        }
        self.sync_gangs(&views, now, input.now_ms, &mut out);
        self.reconcile(&views, input, now, &mut out);
        self.roll_forward(&views, input.now_ms, &mut out);
        self.round(&views, now, input.now_ms, &mut out)?;
        self.count_reasons();
        Ok(out)
    }

    /// Gangs waiting, by the reason last written for them (for metrics).
    fn count_reasons(&mut self) {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for e in self.gangs.values() {
            if let Some(r) = &e.reason {
                *by.entry(r.clone()).or_default() += 1;
            }
        }
        self.stats.waiting = by;
    }

    /// The largest node's and the cluster's GPUs.
    fn limits(&self) -> Limits {
        self.map.as_ref().map_or(Limits::default(), |m| Limits {
            cluster_gpus: m.topology.total_gpus(),
            node_gpus: m.topology.max_server_gpus(),
        })
    }

    /// Step 1: rebuilds the scheduler when the GPU nodes' shape changed.
    /// Gangs with a pod on a node that is gone are evicted whole first.
    fn sync_topology(&mut self, input: &Inputs<'_>, out: &mut Vec<Action>) -> Result<(), K8sError> {
        let shape = topology::shape(input.nodes);
        let same = self.map.as_ref().is_some_and(|m| {
            let mut kept = shape.clone();
            kept.retain(|s| m.skipped.iter().all(|(n, _)| *n != s.0));
            kept == m.shape
        });
        if same || (self.map.is_none() && shape.is_empty()) {
            return Ok(());
        }
        let names: BTreeSet<&str> = shape.iter().map(|s| s.0.as_str()).collect();
        self.evict_on_gone_nodes(input, &names, out);
        let map = topology::build(input.nodes, &self.levels).map_err(K8sError::Topology)?;
        let policies = match self.sched.as_mut() {
            Some(s) => std::mem::replace(s.policies_mut(), PolicySet::fallbacks()),
            None => self.parked.take().unwrap_or_else(PolicySet::fallbacks),
        };
        let Some(map) = map else {
            self.parked = Some(policies);
            self.sched = None;
            self.map = None;
            return Ok(());
        };
        tracing::info!(
            nodes = map.shape.len(),
            gpus = map.topology.total_gpus(),
            "topology (re)built from the GPU nodes"
        );
        for (node, why) in &map.skipped {
            tracing::warn!(node, "node left out of the topology: {why}");
        }
        let mut sched = Scheduler::with_policies(map.topology.clone(), policies);
        sched.set_placement_strategy(self.strategy);
        sched.set_view_window(self.view_window);
        self.sched = Some(sched);
        self.map = Some(map);
        self.vc_ids.clear();
        self.vcs = VcTable::default();
        self.vc(FOREIGN_VC);
        // Every gang is submitted again below; reconcile adopts the bound ones.
        for e in self.gangs.values_mut() {
            e.job = None;
        }
        self.by_job.clear();
        self.stats.topology_rebuilds += 1;
        Ok(())
    }

    /// Evicts every gang with a live pod on a node not in `names` (deleted,
    /// or without GPUs now).
    fn evict_on_gone_nodes(
        &mut self,
        input: &Inputs<'_>,
        names: &BTreeSet<&str>,
        out: &mut Vec<Action>,
    ) {
        let Some(map) = &self.map else { return };
        let gone: Vec<&str> = map
            .shape
            .iter()
            .map(|s| s.0.as_str())
            .filter(|n| !names.contains(n))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut hit: BTreeMap<GangKey, (String, Vec<(String, String)>)> = BTreeMap::new();
        for p in input
            .pods
            .iter()
            .filter(|p| p.ours && !p.phase.ended() && !p.terminating)
        {
            if let Some(node) = p.node.as_deref().filter(|n| gone.contains(n)) {
                let key = gang_key(p);
                hit.entry(key)
                    .or_insert_with(|| (node.to_string(), Vec::new()));
            }
        }
        for (key, (node, _)) in hit {
            let pods: Vec<(String, String)> = input
                .pods
                .iter()
                .filter(|p| p.ours && gang_key(p) == key && p.holds() && !p.terminating)
                .map(|p| (p.namespace.clone(), p.name.clone()))
                .collect();
            let why = format!("node {node} was deleted");
            self.evict(&key, pods, &why, true, out);
        }
    }

    /// The id of a VC (registered on first use).
    fn vc(&mut self, name: &str) -> VcId {
        if let Some(id) = self.vc_ids.get(name) {
            return *id;
        }
        let Some(sched) = self.sched.as_mut() else {
            return VcId(0);
        };
        let id = sched.virtual_cluster(name);
        let quota = self
            .vcs
            .listed
            .as_ref()
            .and_then(|l| l.get(name).copied().flatten());
        sched.set_quota(id, quota);
        self.vc_ids.insert(name.to_string(), id);
        id
    }

    /// Applies a changed VC table: quotas of known VCs.
    fn sync_vcs(&mut self, table: &VcTable) {
        if self.vcs == *table {
            return;
        }
        self.vcs = table.clone();
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        for (name, id) in &self.vc_ids {
            if name == FOREIGN_VC {
                continue;
            }
            let quota = table
                .listed
                .as_ref()
                .and_then(|l| l.get(name).copied().flatten());
            sched.set_quota(*id, quota);
        }
    }

    /// Drops entries of gangs that no longer exist (their jobs leave the
    /// queue; a running one is ended by reconcile when its pods are gone).
    fn forget_gone(&mut self, views: &BTreeMap<GangKey, GangView<'_>>) {
        let gone: Vec<GangKey> = self
            .gangs
            .keys()
            .filter(|k| !views.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(job) = self.gangs.get(&key).and_then(|e| e.job)
                && let Some(sched) = self.sched.as_mut()
                && sched.job(job).is_some_and(|j| j.is_pending())
            {
                let _ = sched.kill(job, self.last_now);
                let _ = sched.forget(job);
                self.by_job.remove(&job);
            }
            let running = self
                .gangs
                .get(&key)
                .and_then(|e| e.job)
                .and_then(|j| self.sched.as_ref()?.job(j))
                .is_some_and(|j| j.is_running());
            if !running {
                self.gangs.remove(&key);
            }
        }
    }

    /// Step 2: per gang, end a finished attempt, submit a complete gang,
    /// withdraw one that is no longer complete, report problems.
    fn sync_gangs(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        now: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        for view in views.values() {
            let entry = self.gangs.entry(view.key.clone()).or_default();
            if entry.evicting && !view.live().any(|p| p.node.is_some()) {
                entry.evicting = false;
            }
            if let Some((_, at)) = &entry.bound
                && (view.plan.is_some() || now_ms.saturating_sub(*at) > ASSUME_MS)
            {
                entry.bound = None;
            }
            self.end_if_finished(view, now);
            if let Some(problem) = view.problem.clone() {
                self.withdraw(&view.key, now);
                self.report_problem(view, &problem, out);
                continue;
            }
            self.submit_or_withdraw(view, now, out);
        }
    }

    /// Ends the attempt of a running gang none of whose pods is live.
    fn end_if_finished(&mut self, view: &GangView<'_>, now: u64) {
        let Some(job) = self.gangs.get(&view.key).and_then(|e| e.job) else {
            return;
        };
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        if !sched.job(job).is_some_and(|j| j.is_running())
            || view.live().next().is_some()
            || view.pods.is_empty()
        {
            return;
        }
        let end = if view.all_succeeded() {
            AttemptEnd::Passed
        } else {
            AttemptEnd::Failed {
                class: FailureClass::Unknown,
                last: true,
            }
        };
        if let Err(e) = sched.end_attempt(job, now, end) {
            tracing::warn!(gang = %view.key, "end_attempt refused: {e}");
        }
        let _ = sched.forget(job);
        self.by_job.remove(&job);
        self.stats.gangs_finished += 1;
        if let Some(e) = self.gangs.get_mut(&view.key) {
            e.job = None;
            e.bound = None;
        }
    }

    /// Takes a pending gang out of the queue (it changed or broke).
    fn withdraw(&mut self, key: &GangKey, now: u64) {
        let Some(e) = self.gangs.get_mut(key) else {
            return;
        };
        let Some(job) = e.job else { return };
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        if sched.job(job).is_some_and(|j| j.is_pending()) {
            let _ = sched.kill(job, now);
            let _ = sched.forget(job);
            e.job = None;
            self.by_job.remove(&job);
        }
    }

    /// Submits a gang that is complete or bound (a bound one is adopted by
    /// reconcile), withdraws a pending one that no longer is or whose size
    /// changed; reports a gang waiting for pods.
    fn submit_or_withdraw(&mut self, view: &GangView<'_>, now: u64, out: &mut Vec<Action>) {
        let Some(entry) = self.gangs.get(&view.key) else {
            return;
        };
        let bound = view.plan.is_some() || entry.bound.is_some();
        let ready = !entry.evicting && (bound || view.complete());
        let gpus = match (&view.plan, &entry.bound) {
            (Some(p), _) | (None, Some((p, _))) => plan_gpus(p),
            _ => view.gpus(),
        };
        let pending = entry
            .job
            .and_then(|j| self.sched.as_ref()?.job(j))
            .is_some_and(|j| j.is_pending());
        if pending && (!ready || entry.gpus != gpus) {
            self.withdraw(&view.key, now);
        }
        if !ready {
            let finished = !view.pods.is_empty() && view.live().next().is_none();
            let evicting = self.gangs.get(&view.key).is_some_and(|e| e.evicting);
            if !finished && !evicting && (view.group.is_some() || view.live().next().is_some()) {
                let live = view.live().count();
                let msg = format!(
                    "{live} of minMember {} pods exist; the gang waits for the rest",
                    view.min_member
                );
                self.set_reason(view, "WaitingForPods", &msg, out);
            }
            return;
        }
        if self.gangs.get(&view.key).is_some_and(|e| e.job.is_some()) {
            return;
        }
        let vc = self.vc(&view.vc);
        let id = JobId(self.next_job);
        self.next_job += 1;
        let user = vc.0;
        let spec = JobSpec {
            id,
            vc,
            user,
            gpus,
            submitted_s: (view.last_pod_ms / 1000).min(now),
        };
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        match sched.submit(spec) {
            Ok(()) => {
                self.by_job.insert(id, view.key.clone());
                if let Some(e) = self.gangs.get_mut(&view.key) {
                    e.job = Some(id);
                    e.gpus = gpus;
                }
            }
            Err(e) => tracing::warn!(gang = %view.key, "submit refused: {e}"),
        }
    }

    /// Step 3: the engine's truth, reconciled; interrupted gangs evicted.
    fn reconcile(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        input: &Inputs<'_>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let mut truth = EngineTruth::default();
        let mut broken: Vec<(GangKey, String)> = Vec::new();
        let down: BTreeSet<&str> = input
            .nodes
            .iter()
            .filter(|n| n.health == gangway_core::Health::Down)
            .map(|n| n.name.as_str())
            .collect();
        for view in views.values() {
            match self.held(view, &down) {
                Ok(Some((job, placement))) => {
                    truth.running.insert(job, placement);
                }
                Ok(None) => {}
                Err(why) => broken.push((view.key.clone(), why)),
            }
        }
        self.foreign_truth(input, &mut truth);
        let Some(map) = &self.map else { return };
        for n in input.nodes {
            if let Some(s) = map.server(&n.name) {
                truth.health.insert(s, n.health);
            }
        }
        let foreign_vc = self.vc_ids.get(FOREIGN_VC).copied();
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        let diffs = sched.reconcile(&truth, foreign_vc, now);
        for (key, why) in broken {
            let pods = live_bound(views, &key);
            let lost = why.contains("NotReady");
            self.evict(&key, pods, &why, lost, out);
        }
        for d in diffs {
            self.on_difference(d, views, out);
        }
    }

    /// Where a gang's GPUs are held, by its bound pods' plan or the plan we
    /// just bound: `Ok(None)` if nowhere, `Err` if its pods cannot be
    /// accounted for (a node unknown, a pod of the plan deleted).
    fn held(
        &mut self,
        view: &GangView<'_>,
        down: &BTreeSet<&str>,
    ) -> Result<Option<(JobId, Placement)>, String> {
        let Some(entry) = self.gangs.get(&view.key) else {
            return Ok(None);
        };
        if entry.evicting {
            return Ok(None);
        }
        let plan = match (&view.plan, &entry.bound) {
            (Some(p), _) | (None, Some((p, _))) => p.clone(),
            _ => return Ok(None),
        };
        if view.live().next().is_none() {
            return Ok(None);
        }
        let missing: Vec<&str> = plan
            .places
            .iter()
            .filter(|pl| view.pods.iter().all(|p| p.name != pl.pod))
            .map(|pl| pl.pod.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "pod {} of the gang was deleted while it ran",
                missing.join(", ")
            ));
        }
        if let Some(pl) = plan
            .places
            .iter()
            .find(|pl| down.contains(pl.node.as_str()))
        {
            return Err(format!("node {} is NotReady", pl.node));
        }
        let Some(map) = &self.map else {
            return Ok(None);
        };
        let placement = plan
            .placement(|n| map.server(n).map(|s| (s, map.gpus(s))))
            .ok_or_else(|| "its plan names a node or GPU the cluster does not have".to_string())?;
        let job = match entry.job {
            Some(j) => j,
            None => return Ok(None),
        };
        Ok(Some((job, placement)))
    }

    /// GPUs held outside Gangway's running gangs, as foreign load: other
    /// schedulers' GPU pods (each keeps the GPUs it was first given, the
    /// highest free indices of its node), and our pods on their way out
    /// (being deleted, or of a gang being evicted), which hold the GPUs
    /// of their annotation until they are gone.
    fn foreign_truth(&mut self, input: &Inputs<'_>, truth: &mut EngineTruth) {
        let (Some(map), Some(sched)) = (&self.map, &self.sched) else {
            return;
        };
        let mut seen = BTreeSet::new();
        let mut taken: BTreeMap<ServerId, u64> = BTreeMap::new();
        for (_, node, mask) in self.foreign.values() {
            if let Some(s) = map.server(node) {
                *taken.entry(s).or_default() |= mask;
            }
        }
        for p in input.pods.iter().filter(|p| p.holds()) {
            let exact = p.ours && p.plan.is_some() && p.gpu_indices.is_some();
            let leaving = exact
                && (p.terminating || self.gangs.get(&gang_key(p)).is_some_and(|e| e.evicting));
            if exact && !leaving {
                continue;
            }
            let Some(server) = p.node.as_deref().and_then(|n| map.server(n)) else {
                continue;
            };
            let Ok(want) = p.gpus.clone() else { continue };
            if want == 0 {
                continue;
            }
            seen.insert(p.uid.clone());
            if !self.foreign.contains_key(&p.uid) {
                let gpus = map.gpus(server);
                let mask = if exact {
                    p.gpu_indices
                        .iter()
                        .flatten()
                        .filter(|g| **g < gpus)
                        .fold(0u64, |m, g| m | 1 << g)
                } else {
                    let used = taken.get(&server).copied().unwrap_or(0);
                    (0..gpus)
                        .rev()
                        .filter(|g| used >> g & 1 == 0 && sched.state().owner(server, *g).is_none())
                        .take(want as usize)
                        .fold(0u64, |m, g| m | 1 << g)
                };
                let id = JobId(FOREIGN_BIT | self.next_foreign);
                self.next_foreign += 1;
                *taken.entry(server).or_default() |= mask;
                self.foreign
                    .insert(p.uid.clone(), (id, map.node(server).to_string(), mask));
            }
            if let Some((id, _, mask)) = self.foreign.get(&p.uid)
                && *mask != 0
            {
                let part = gangway_core::ServerGpus {
                    server,
                    gpus: *mask,
                };
                truth.running.insert(*id, Placement { parts: vec![part] });
            }
        }
        self.foreign.retain(|uid, _| seen.contains(uid));
    }

    /// What a reconcile difference means for our gangs.
    fn on_difference(
        &mut self,
        d: Difference,
        views: &BTreeMap<GangKey, GangView<'_>>,
        out: &mut Vec<Action>,
    ) {
        match d {
            Difference::Health {
                server,
                now,
                interrupted,
                ..
            } => {
                let node = self
                    .map
                    .as_ref()
                    .map_or("?".into(), |m| m.node(server).to_string());
                tracing::warn!(node, health = ?now, "node health changed");
                for job in interrupted {
                    if let Some(key) = self.by_job.get(&job).cloned() {
                        let pods = live_bound(views, &key);
                        let why = format!("node {node} is {}", health_word(now));
                        self.evict(&key, pods, &why, now == gangway_core::Health::Down, out);
                    }
                }
            }
            Difference::Unresolved { job, why } => {
                if let Some(key) = self.by_job.get(&job).cloned() {
                    let pods = live_bound(views, &key);
                    self.evict(&key, pods, &why, false, out);
                } else {
                    tracing::warn!("foreign job {}: {why}", job.0 & !FOREIGN_BIT);
                }
            }
            Difference::ForeignEnded { job } => {
                if let Some(s) = self.sched.as_mut() {
                    let _ = s.forget(job);
                }
            }
            Difference::Started { job, .. } => {
                if let Some(key) = self.by_job.get(&job) {
                    tracing::info!(gang = %key, "found bound; adopted");
                }
            }
            Difference::NotRunning { job } => {
                if let Some(key) = self.by_job.get(&job) {
                    tracing::info!(gang = %key, "its pods are gone; re-queued");
                }
            }
            other => tracing::debug!("{other}"),
        }
    }

    /// Evicts a gang's pods (`grace0`: at once, for a lost node) and
    /// reports why on the gang.
    fn evict(
        &mut self,
        key: &GangKey,
        pods: Vec<(String, String)>,
        why: &str,
        grace0: bool,
        out: &mut Vec<Action>,
    ) {
        let e = self.gangs.entry(key.clone()).or_default();
        e.evicting = true;
        e.bound = None;
        // Not placed again until its pods are gone (and back).
        self.withdraw(key, self.last_now);
        let n = pods.len();
        self.stats.gangs_interrupted += 1;
        let note = format!("{why}: the gang is re-queued whole; its {n} running pods are evicted");
        tracing::warn!(gang = %key, "{note}");
        out.push(Action::Event(EventOrder {
            target: target(key),
            warning: true,
            reason: "GangInterrupted".into(),
            note,
        }));
        if !pods.is_empty() {
            out.push(Action::Evict {
                gang: key.clone(),
                pods,
                grace0,
            });
        }
    }

    /// Step 4: binds the unbound pods of a gang whose bound pods carry a
    /// plan (a scheduler stopped while binding it).
    fn roll_forward(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        for view in views.values() {
            let Some(plan) = &view.plan else { continue };
            let Some(e) = self.gangs.get_mut(&view.key) else {
                continue;
            };
            if e.evicting || now_ms.saturating_sub(e.rolled_ms) < ROLL_FORWARD_MS {
                continue;
            }
            let Some(job) = e.job else { continue };
            let binds: Vec<PodBind> = view
                .unbound()
                .filter_map(|p| {
                    plan.place(&p.name)
                        .map(|pl| pod_bind(&view.key, job, plan, pl))
                })
                .collect();
            if binds.is_empty() {
                continue;
            }
            e.rolled_ms = now_ms;
            tracing::info!(gang = %view.key, pods = binds.len(), "finishing a gang bound in part");
            out.push(Action::Bind(report::BindOrder {
                gang: view.key.clone(),
                job,
                binds,
                last_pod_ms: view.last_pod_ms,
            }));
        }
    }

    /// Step 5: a round, and what it decided.
    fn round(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        now: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), K8sError> {
        let Some(sched) = self.sched.as_mut() else {
            return Ok(());
        };
        let t = std::time::Instant::now();
        let report = sched
            .round(now)
            .map_err(|e| K8sError::Scheduler(format!("round: {e}")))?;
        self.stats.note_round(&report, t.elapsed());
        for p in &report.preempted {
            if let Some(key) = self.by_job.get(&p.job).cloned() {
                let why = format!("preempted by the reclaim policy after {} s", p.ran_s);
                self.evict(&key, live_bound(views, &key), &why, false, out);
            }
        }
        for m in &report.migrations {
            if let Some(key) = self.by_job.get(&m.job).cloned() {
                let why = "moved by the defragment policy (pods are recreated by their controller)";
                self.evict(&key, live_bound(views, &key), why, false, out);
            }
        }
        let mut taken: BTreeMap<ServerId, u64> = BTreeMap::new();
        for start in &report.starts {
            self.start(
                views,
                start.job,
                &start.choice.placement,
                &mut taken,
                now,
                now_ms,
                out,
            );
        }
        let waiting: Vec<(JobId, WaitReason)> = report.waiting.clone();
        let mut seen: BTreeSet<JobId> = BTreeSet::new();
        for (job, reason) in waiting {
            seen.insert(job);
            self.waits(views, job, reason, out);
        }
        let queued: Vec<JobId> = self
            .sched
            .as_ref()
            .map(|s| s.pending_jobs().filter(|j| !seen.contains(j)).collect())
            .unwrap_or_default();
        for job in queued {
            let reason = self
                .sched
                .as_ref()
                .and_then(|s| s.why_pending(job))
                .unwrap_or(WaitReason::Queued);
            self.waits(views, job, reason, out);
        }
        Ok(())
    }

    /// A started gang: its pods' plan, bound whole.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        job: JobId,
        placement: &Placement,
        taken: &mut BTreeMap<ServerId, u64>,
        now: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let Some(key) = self.by_job.get(&job).cloned() else {
            return;
        };
        let Some(view) = views.get(&key) else { return };
        let (Some(map), Some(sched)) = (&self.map, &self.sched) else {
            return;
        };
        let spare = |s: ServerId| {
            let used = taken.get(&s).copied().unwrap_or(0);
            (0..map.gpus(s))
                .filter(|g| used >> g & 1 == 0 && sched.state().owner(s, *g).is_none())
                .fold(0u64, |m, g| m | 1 << g)
        };
        let fitted = plan::fit(&view.needs(), placement, |s| map.node(s).to_string(), spare);
        let Some((plan, used)) = fitted else {
            let _ = self.sched.as_mut().map(|s| s.requeue(job, now));
            let note = format!(
                "Gangway placed it on {} but its pods do not divide into those nodes' shares; placed again next cycle",
                placement_text(map, placement)
            );
            self.set_reason(view, "PodsDoNotFit", &note, out);
            return;
        };
        for part in &used.parts {
            *taken.entry(part.server).or_default() |= part.gpus;
        }
        let binds: Vec<PodBind> = plan
            .places
            .iter()
            .map(|pl| pod_bind(&key, job, &plan, pl))
            .collect();
        let text = placement_text(map, &used);
        tracing::info!(gang = %key, "binding {} pods to {text}", binds.len());
        if let Some(e) = self.gangs.get_mut(&key) {
            e.bound = Some((plan, now_ms));
            e.reason = None;
        }
        out.push(Action::Status {
            gang: key.clone(),
            phase: "Scheduled".into(),
            condition: (
                "True".into(),
                "Scheduled".into(),
                format!("bound to {text}"),
            ),
        });
        out.push(Action::Event(EventOrder {
            target: target(&key),
            warning: false,
            reason: "Scheduled".into(),
            note: format!("Gangway bound {} pods to {text}", binds.len()),
        }));
        out.push(Action::Bind(report::BindOrder {
            gang: key,
            job,
            binds,
            last_pod_ms: view.last_pod_ms,
        }));
    }

    /// A waiting gang's reason, written when it changes.
    fn waits(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        job: JobId,
        reason: WaitReason,
        out: &mut Vec<Action>,
    ) {
        let Some(key) = self.by_job.get(&job).cloned() else {
            return;
        };
        let Some(view) = views.get(&key) else { return };
        let note = format!("{}: {}", reason.as_str(), explain(reason));
        self.set_reason(view, reason_name(reason), &note, out);
    }

    /// Writes a gang's reason to its status and an Event, if it changed.
    fn set_reason(&mut self, view: &GangView<'_>, reason: &str, note: &str, out: &mut Vec<Action>) {
        let e = self.gangs.entry(view.key.clone()).or_default();
        if e.reason.as_deref() == Some(reason) {
            return;
        }
        e.reason = Some(reason.to_string());
        let note = format!("{} ({} GPUs) waits: {note}", view.key, view.gpus());
        tracing::info!(gang = %view.key, "{note}");
        out.push(Action::Status {
            gang: view.key.clone(),
            phase: "Pending".into(),
            condition: ("False".into(), reason.to_string(), note.clone()),
        });
        out.push(Action::Event(EventOrder {
            target: target(&view.key),
            warning: true,
            reason: "FailedScheduling".into(),
            note,
        }));
    }

    /// Reports a gang's problem once (Event and status).
    fn report_problem(
        &mut self,
        view: &GangView<'_>,
        problem: &GangProblem,
        out: &mut Vec<Action>,
    ) {
        let text = problem.to_string();
        let e = self.gangs.entry(view.key.clone()).or_default();
        if !e.reported.insert(text.clone()) {
            return;
        }
        self.stats.problems += 1;
        tracing::warn!(gang = %view.key, "{text}");
        e.reason = Some(problem.reason().to_string());
        out.push(Action::Event(EventOrder {
            target: target(&view.key),
            warning: true,
            reason: problem.reason().to_string(),
            note: text.clone(),
        }));
        if matches!(view.key, GangKey::Group { .. }) {
            out.push(Action::Status {
                gang: view.key.clone(),
                phase: "Pending".into(),
                condition: ("False".into(), problem.reason().to_string(), text),
            });
        }
    }

    /// How binding a gang went: `failed` names the pods whose Binding the
    /// API refused. A gang bound in part is evicted and re-queued whole.
    pub fn on_bound(
        &mut self,
        gang: &GangKey,
        job: JobId,
        bound: &[(String, String)],
        failed: &[(String, String)],
        now_ms: u64,
    ) {
        self.stats.pods_bound += bound.len() as u64;
        if failed.is_empty() {
            self.stats.gangs_bound += 1;
            return;
        }
        let now = self.now_s(now_ms);
        let why = format!(
            "binding failed for {} of its pods ({})",
            failed.len(),
            failed
                .iter()
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(s) = self.sched.as_mut()
            && s.job(job).is_some_and(|j| j.is_running())
        {
            let _ = s.requeue(job, now);
        }
        let mut out = Vec::new();
        self.evict(gang, bound.to_vec(), &why, false, &mut out);
        self.pending_out.extend(out);
    }
}

fn health_word(h: gangway_core::Health) -> &'static str {
    match h {
        gangway_core::Health::Up => "Ready again",
        gangway_core::Health::Draining => "cordoned (unschedulable)",
        gangway_core::Health::Down => "NotReady",
    }
}

/// The gang a pod of ours belongs to.
fn gang_key(p: &PodInfo) -> GangKey {
    match &p.group {
        Some(g) => GangKey::Group {
            namespace: p.namespace.clone(),
            name: g.clone(),
        },
        None => GangKey::Pod {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        },
    }
}

/// A gang's live bound pods, `(namespace, name)`.
fn live_bound(views: &BTreeMap<GangKey, GangView<'_>>, key: &GangKey) -> Vec<(String, String)> {
    views.get(key).map_or_else(Vec::new, |v| {
        v.live()
            .filter(|p| p.node.is_some())
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect()
    })
}

/// The object a gang's Events and status go to.
fn target(key: &GangKey) -> Target {
    match key {
        GangKey::Group { namespace, name } => Target::PodGroup {
            namespace: namespace.clone(),
            name: name.clone(),
        },
        GangKey::Pod { namespace, name } => Target::Pod {
            namespace: namespace.clone(),
            name: name.clone(),
        },
    }
}

/// GPUs of a plan.
fn plan_gpus(plan: &Plan) -> u32 {
    plan.places.iter().map(|p| p.gpus.len() as u32).sum()
}

/// The Binding of one pod of a plan, with its annotations.
fn pod_bind(key: &GangKey, job: JobId, plan: &Plan, place: &plan::PodPlace) -> PodBind {
    let mut annotations = BTreeMap::new();
    annotations.insert(
        GPU_INDICES_ANNOTATION.to_string(),
        indices_text(&place.gpus),
    );
    annotations.insert(GANG_PLAN_ANNOTATION.to_string(), plan.text());
    annotations.insert(GANG_ANNOTATION.to_string(), format!("{key}#{}", job.0));
    PodBind {
        namespace: key.namespace().to_string(),
        pod: place.pod.clone(),
        node: place.node.clone(),
        annotations,
    }
}

/// A placement in words: `n1:0-3 n2:0-7`.
fn placement_text(map: &ClusterMap, p: &Placement) -> String {
    p.parts
        .iter()
        .map(|part| {
            let idx: Vec<u32> = (0..64u32).filter(|g| part.gpus >> g & 1 == 1).collect();
            format!("{}:{}", map.node(part.server), indices_text(&idx))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a VC is admitted by the table.
fn known_vc(table: &VcTable, vc: &str) -> Result<(), GangProblem> {
    match &table.listed {
        None => Ok(()),
        Some(l) if l.contains_key(vc) => Ok(()),
        Some(l) => Err(GangProblem::UnknownVc {
            gang: String::new(),
            vc: vc.to_string(),
            known: l.keys().cloned().collect::<Vec<_>>().join(", "),
            configmap: table.source.clone(),
        }),
    }
}
