//! The host: Gangway's scheduler kept in line with the cluster, one cycle
//! at a time. A cycle takes what the API server's objects say
//! ([`Inputs`], from the watch caches) and returns what to do
//! ([`Action`]s: bind, evict, report); it does no I/O itself, so the same
//! inputs give the same actions and it is tested without a cluster.
//!
//! The books hold what the cluster holds: a GPU is held by a pod that is
//! bound and has not ended (being deleted included: its kubelet still runs
//! it), or by a Binding sent that the cache does not show yet
//! ([`claims`]). A cycle:
//! 1. waits node signals out ([`nodes`]) and rebuilds the topology if the
//!    GPU nodes changed (a deleted node's gangs are evicted whole first);
//! 2. groups our pods into gangs ([`gangs`](super::gangs)); a complete
//!    gang is submitted, one that is no longer complete (or changed, or is
//!    waiting for its PodGroup) leaves the queue;
//! 3. finds what each gang holds: a gang that holds nothing any more ends
//!    (its pods finished, or were deleted: a cancel), one that cannot run
//!    as planned (a pod deleted while it ran, a node lost past its grace)
//!    is evicted whole;
//! 4. reconciles the scheduler with that truth (our gangs where their
//!    pods are, every other GPU pod as foreign load, node health);
//! 5. finishes gangs bound in part, and binds gangs that waited for
//!    evicted pods to leave their GPUs;
//! 6. runs a round (unless a watch is catching up): starts become
//!    Bindings of every pod, or wait for GPUs still held by pods on their
//!    way out; preempted and migrated gangs are evicted whole; waiting
//!    gangs get their reason.

mod claims;
mod fits;
mod lifecycle;
pub mod nodes;
mod rebuild;
mod round;
#[cfg(test)]
mod tests;
mod truth;

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::policy::PolicySet;
use gangway_core::{JobId, Placement, PlacementStrategy, Scheduler, VcId, WaitReason};

pub use crate::vcs::{VcQuota, VcTable};
pub use claims::{CONFIRM_MS, ClaimState, ReadOrder, ReadOutcome};

use super::gangs::{self, GangKey, Limits};
use super::objects::{GroupInfo, NodeInfo, PodInfo};
use super::plan::Plan;
use super::report::{Action, BindOrder, BindOutcome, Stats};
use super::topology::ClusterMap;
use super::{GangProblem, K8sError};
use claims::Claims;
use nodes::{Grace, NodeGuard};

/// Gangway ids of foreign pods (other schedulers' GPU pods, and ours on
/// their way out): this bit plus a counter.
pub const FOREIGN_BIT: u64 = 1 << 62;
/// The virtual cluster of foreign load.
pub const FOREIGN_VC: &str = "(foreign)";
/// How long before a roll-forward bind of the same pods is tried again.
const ROLL_FORWARD_MS: u64 = 5_000;
/// How long a start waits for pods on their way out to leave its GPUs
/// before it is placed again.
const NOMINATED_MAX_MS: u64 = 120_000;
/// The longest wait before a gang whose Bindings were refused is placed
/// again (the wait doubles from 1 s with each refusal in a row).
const BIND_BACKOFF_MAX_MS: u64 = 60_000;
/// How long after an eviction was ordered it is ordered again for pods
/// still there (the delete was lost, or the API server was down).
const EVICT_AGAIN_MS: u64 = 5_000;

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
    /// Whether the watch caches are current. While a watch is failing or
    /// catching up nothing new is placed; the books are still reconciled.
    pub fresh: bool,
    /// What every pod that has not ended requests of its node (GPUs left
    /// out), summed by node: ours and others'.
    pub usage: &'a BTreeMap<String, crate::fit::Resources>,
}

/// A start waiting for pods on their way out to leave its GPUs.
#[derive(Clone, Debug)]
struct Nominated {
    /// Every pod's place.
    plan: Plan,
    /// Its GPUs.
    placement: Placement,
    /// When it was placed (Unix ms).
    since_ms: u64,
}

/// What the host remembers of a gang between cycles.
#[derive(Clone, Debug, Default)]
struct Entry {
    /// Its Gangway job, while submitted.
    job: Option<JobId>,
    /// GPUs it was submitted with.
    gpus: u32,
    /// A start waiting for its GPUs to be left.
    nominated: Option<Nominated>,
    /// When its pods were last asked to bind by a roll-forward.
    rolled_ms: u64,
    /// Its pods are being evicted: not placed until they are gone.
    evicting: bool,
    /// When its eviction was last ordered (Unix ms), and whether at once
    /// (a lost node): ordered again while a pod of it is still there.
    evicted_ms: u64,
    evict_grace0: bool,
    /// Why it cannot run as planned (a Binding refused or gone
    /// elsewhere): evicted whole at the next cycle.
    broken: Option<String>,
    /// Nodes that could not hold all its pods together: left out until it
    /// is placed.
    excluded: BTreeSet<gangway_core::ServerId>,
    /// Refused Bindings in a row, and the time before which it is not
    /// placed again.
    bind_failures: u32,
    retry_after_ms: u64,
    /// The last reason written to its status and Events.
    reason: Option<String>,
    /// The last note written to its status with that reason (a note that
    /// changes, "2 of minMember 3 pods exist" after "1 of", is written
    /// again; an Event is made only for a new reason).
    note: Option<String>,
    /// Problems already reported (each once).
    reported: BTreeSet<String>,
}

/// The host (see the module docs).
pub struct Host {
    levels: Vec<String>,
    view_window: usize,
    strategy: PlacementStrategy,
    /// Reclaim and defragment leave gangs younger than this alone.
    min_run_s: u64,
    /// The extended resource that counts GPUs (in `minResources`).
    gpu_resource: String,
    /// The node label naming GPU types, which a pod's `nodeSelector` may
    /// name for its gang ("": types are not read).
    gpu_type_label: String,
    /// What the cluster has free this cycle, by resource (GPUs from the
    /// books), on nodes that take new work: for `minResources`.
    free_now: crate::fit::Resources,
    /// The policies while there is no scheduler (no GPU node yet).
    parked: Option<PolicySet>,
    sched: Option<Scheduler>,
    map: Option<ClusterMap>,
    guard: NodeGuard,
    vcs: VcTable,
    vc_ids: BTreeMap<String, VcId>,
    gangs: BTreeMap<GangKey, Entry>,
    by_job: BTreeMap<JobId, GangKey>,
    claims: Claims,
    /// When each pod of ours was first seen in the cache (Unix ms): the
    /// bind latency is measured from its gang's last pod seen, to the
    /// millisecond (`creationTimestamp` has whole seconds).
    seen_ms: BTreeMap<String, u64>,
    /// Foreign holders by pod uid: id, node, GPUs taken for them.
    foreign: BTreeMap<String, (JobId, String, u64)>,
    next_job: u64,
    next_foreign: u64,
    last_now: u64,
    /// The current cycle's time, Unix ms.
    now_ms: u64,
    /// Actions decided between cycles.
    pending_out: Vec<Action>,
    /// Counters for the metrics endpoint.
    pub stats: Stats,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("gangs", &self.gangs.len())
            .field("claims", &self.claims.len())
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
            min_run_s: 0,
            gpu_resource: "nvidia.com/gpu".into(),
            gpu_type_label: String::new(),
            free_now: crate::fit::Resources::new(),
            parked: Some(policies),
            sched: None,
            map: None,
            guard: NodeGuard::new(Grace::default()),
            vcs: VcTable::default(),
            vc_ids: BTreeMap::new(),
            gangs: BTreeMap::new(),
            by_job: BTreeMap::new(),
            claims: Claims::default(),
            seen_ms: BTreeMap::new(),
            foreign: BTreeMap::new(),
            next_job: 1,
            next_foreign: 1,
            last_now: 0,
            now_ms: 0,
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

    /// Sets the extended resource that counts GPUs (`nvidia.com/gpu`).
    pub fn set_gpu_resource(&mut self, name: &str) {
        self.gpu_resource = name.to_string();
    }

    /// Sets the node label naming GPU types (`nvidia.com/gpu.product`).
    pub fn set_gpu_type_label(&mut self, label: &str) {
        self.gpu_type_label = label.to_string();
    }

    /// Sets how long node signals are waited out.
    pub fn set_grace(&mut self, grace: Grace) {
        self.guard = NodeGuard::new(grace);
    }

    /// Sets the run time under which reclaim and defragment leave a gang
    /// alone (seconds).
    pub fn set_min_run_s(&mut self, secs: u64) {
        self.min_run_s = secs;
        if let Some(s) = self.sched.as_mut() {
            s.set_min_run_before_stop(secs);
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
        self.now_ms = self.now_ms.max(now_ms);
        self.last_now = self.last_now.max(now_ms / 1000);
        self.last_now
    }

    /// One cycle (see the module docs): the actions to carry out, in order.
    pub fn cycle(&mut self, input: &Inputs<'_>) -> Result<Vec<Action>, K8sError> {
        let now = self.now_s(input.now_ms);
        let mut out = std::mem::take(&mut self.pending_out);
        let nodes = self.guard.apply(input.nodes, input.now_ms);
        self.sync_topology(&nodes, input.pods, &mut out)?;
        self.sync_vcs(input.vcs);
        let limits = self.limits();
        let vc_label_of = |p: &PodInfo| p.vc_label.clone().unwrap_or_else(|| p.namespace.clone());
        let vcs = self.vcs.clone();
        let views = gangs::collect(input.pods, input.groups, limits, vc_label_of, |vc| {
            known_vc(&vcs, vc)
        });
        self.claims.settle(input.pods, input.now_ms);
        self.note_seen(input.pods, input.now_ms);
        self.forget_gone(&views);
        if self.sched.is_none() {
            for view in views.values().filter(|v| !v.pods.is_empty()) {
                self.set_reason(view, "NoGPUNodes", "no node has GPUs yet", &mut out);
            }
            return Ok(out);
        }
        self.free_now = self.free_totals(&nodes, input.usage);
        self.sync_gangs(&views, input, now, &mut out);
        let holds = self.holds(&views, &nodes);
        self.act_on_holds(&views, &holds, now, &mut out);
        self.reconcile(&views, &holds, &nodes, input, now, &mut out);
        let occupied = self.occupied(input.pods);
        if input.fresh {
            self.roll_forward(&views, input.now_ms, &mut out);
        }
        self.release_nominated(&views, &occupied, now, input.now_ms, &mut out);
        self.settle_queue(&views, now, input.now_ms);
        let usage = self.usage(input.usage, input.pods);
        let fits = self.restrict_pending(&views, &nodes, &usage);
        if input.fresh {
            let at = round::At {
                occupied: &occupied,
                nodes: &nodes,
                fits: &fits,
                now,
                now_ms: input.now_ms,
            };
            self.round(&views, &at, usage, &mut out)?;
        }
        self.count_reasons();
        Ok(out)
    }

    /// Notes when each pod of ours was first seen; forgets gone pods.
    fn note_seen(&mut self, pods: &[PodInfo], now_ms: u64) {
        let mut seen = BTreeMap::new();
        for p in pods.iter().filter(|p| p.ours) {
            let at = self.seen_ms.get(&p.uid).copied().unwrap_or(now_ms);
            seen.insert(p.uid.clone(), at);
        }
        self.seen_ms = seen;
    }

    /// When the last pod of a gang was first seen (Unix ms).
    fn last_seen_ms(&self, view: &gangs::GangView<'_>) -> u64 {
        view.pods
            .iter()
            .filter_map(|p| self.seen_ms.get(&p.uid))
            .max()
            .copied()
            .unwrap_or(view.last_pod_ms)
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
        self.stats.binds_unresolved = self.claims.unknown() as u64;
        self.stats.nominated = self
            .gangs
            .values()
            .filter(|e| e.nominated.is_some())
            .count() as u64;
    }

    /// The largest node's and the cluster's GPUs.
    fn limits(&self) -> Limits {
        self.map.as_ref().map_or(Limits::default(), |m| Limits {
            cluster_gpus: m.topology.total_gpus(),
            node_gpus: m.topology.max_server_gpus(),
        })
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
        rebuild::apply_quota(sched, id, name, &self.vcs);
        self.vc_ids.insert(name.to_string(), id);
        id
    }

    /// How binding a gang went, one outcome per Binding of `order`. A pod
    /// bound (or whose reply was lost) holds its GPUs until the cache shows
    /// it; a refused Binding breaks the gang, which is evicted whole at the
    /// next cycle and placed again after a back-off.
    pub fn on_bound(&mut self, order: &BindOrder, outcomes: &[BindOutcome], now_ms: u64) {
        let mut refused = Vec::new();
        for (bind, outcome) in order.binds.iter().zip(outcomes) {
            let state = match outcome {
                BindOutcome::Bound => ClaimState::Sent,
                BindOutcome::Unknown(_) => ClaimState::Unknown,
                BindOutcome::Refused(why) => {
                    refused.push(format!("{} ({why})", bind.pod));
                    continue;
                }
            };
            if state == ClaimState::Sent {
                self.stats.pods_bound += 1;
            } else {
                self.stats.binds_unknown += 1;
            }
            self.claims.add(
                &bind.namespace,
                &bind.pod,
                &bind.uid,
                &order.gang,
                &bind.node,
                &bind.gpus,
                state,
                now_ms,
            );
        }
        let e = self.gangs.entry(order.gang.clone()).or_default();
        if refused.is_empty() {
            self.stats.gangs_bound += 1;
            e.bind_failures = 0;
            return;
        }
        self.stats.bind_errors += refused.len() as u64;
        e.bind_failures = e.bind_failures.saturating_add(1);
        let wait = bind_backoff_ms(e.bind_failures);
        e.retry_after_ms = now_ms.saturating_add(wait);
        e.broken = Some(format!(
            "binding refused for {} of its pods: {}",
            refused.len(),
            refused.join(", ")
        ));
    }

    /// The pods whose Binding's reply was lost, to read now.
    pub fn binds_to_read(&mut self, now_ms: u64) -> Vec<ReadOrder> {
        self.claims.due_reads(now_ms)
    }

    /// What reading a pod said of its Binding (see [`Host::binds_to_read`]).
    pub fn on_read(&mut self, order: &ReadOrder, outcome: &ReadOutcome, now_ms: u64) {
        let hit = self
            .claims
            .resolve(&order.namespace, &order.pod, &order.uid, outcome, now_ms);
        if let Some(gang) = hit {
            let why = format!("pod {} was bound to another node", order.pod);
            self.gangs.entry(gang).or_default().broken = Some(why);
        }
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

/// How long a gang waits before it is placed again after `failures`
/// refusals in a row (at least 1): 1 s, doubling, at most
/// [`BIND_BACKOFF_MAX_MS`].
fn bind_backoff_ms(failures: u32) -> u64 {
    (1_000u64 << failures.saturating_sub(1).min(16)).min(BIND_BACKOFF_MAX_MS)
}

/// GPUs of a plan.
fn plan_gpus(plan: &Plan) -> u32 {
    plan.places.iter().map(|p| p.gpus.len() as u32).sum()
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
