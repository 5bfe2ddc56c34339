//! `quota-reclaim`: YARN/Volcano-style quota reclaim (reclaim slot).
//!
//! Philly's virtual clusters could run on idle GPUs beyond their quota, and
//! YARN took such GPUs back by preemption when a VC within its quota needed
//! them (the study's Table 7, "Job preempted: YARN reclaims any GPU currently
//! in use to schedule another job"). This policy does the same:
//!
//! * a waiting job is *entitled* if its VC has a quota and would stay within
//!   it with the job (GPUs held plus GPUs of jobs this round already started
//!   for it, plus the job's own);
//! * a running job is *reclaimable* if its VC holds more than its quota and
//!   stays at or above the quota without it (only the borrowed part is
//!   taken back); a VC without a quota borrows everything it holds;
//! * entitled jobs are served most under-served VC first (smallest share of
//!   its quota in use), then oldest; for each, reclaimable jobs are stopped
//!   newest first (they lose the least work) until it fits within its
//!   spread limit, preferring the server or domain that needs the fewest
//!   stops ([`gangway_plugin_sdk::room::Room`]);
//! * jobs that ran less than `min_run_s` are left alone, so a job is never
//!   stopped moments after it started (a YARN preemption timeout does the
//!   same), and at most `max_starts` jobs start this way per round, of the
//!   first 64 entitled ones (a round's cost stays bounded).
//!
//! # GPU types
//!
//! It takes the GPU types (contract 2.2). A VC with quotas per type
//! (Kueue's shape) is counted type by type, each type an account of its
//! own: a waiting job is entitled on each of its allowed types whose
//! nominal quota has room for it beside what its VC holds of the type
//! (tried in its order of preference), a running job is reclaimable if its
//! VC holds more of its type than the nominal quota of it and stays at or
//! above that without it, and only jobs running on the type a job is
//! served on are stopped for it, planned on that type's servers. So a VC
//! over its A100 quota gives A100s back even while it is under its quota
//! in sum. A VC with one pooled quota is counted as above, and its waiting
//! jobs are served on any type they may use.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `min_run_s` | seconds | `0` | a running job younger than this is never stopped |
//! | `max_starts` | count | `16` | most waiting jobs started by reclaim in one round |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_quota_reclaim::QuotaReclaim;
//!
//! let vc = |id, quota, held| VcUsage { id: VcId(id), quota_gpus: Some(quota), weight: 1, held_gpus: held, ..VcUsage::default() };
//! let view = ReclaimView {
//!     cluster: ClusterSummary { server_level: Level(1), ..ClusterSummary::default() },
//!     // VC 0 borrows: it holds 16 GPUs against a quota of 8. VC 1 holds nothing.
//!     vcs: vec![vc(0, 8, 16), vc(1, 8, 0)],
//!     servers: vec![
//!         ServerState { id: ServerId(0), domain: 0, gpus: 8, free: 0 },
//!         ServerState { id: ServerId(1), domain: 0, gpus: 8, free: 0 },
//!     ],
//!     running: vec![
//!         RunningJob { id: JobId(1), vc: VcId(0), gpus: 8, started_s: 10, parts: vec![(ServerId(0), 8)], ..RunningJob::default() },
//!         RunningJob { id: JobId(2), vc: VcId(0), gpus: 8, started_s: 20, parts: vec![(ServerId(1), 8)], ..RunningJob::default() },
//!     ],
//!     waiting: vec![WaitingJob {
//!         job: PendingJob { id: JobId(3), vc: VcId(1), gpus: 8, min_level: Level(1), min_servers: 1, ..PendingJob::default() },
//!         reason: WaitReason::NoCapacity,
//!         limit: SpreadLimit::level(Level(1)),
//!     }],
//!     ..ReclaimView::default()
//! };
//! let d = QuotaReclaim::from_config(b"").unwrap().reclaim(&view);
//! assert_eq!(d.stop, vec![JobId(2)], "the newest borrowed job");
//! assert_eq!(d.start, vec![JobId(3)]);
//! ```

use rustc_hash::FxHashSet;

use gangway_plugin_sdk::room::TypedRooms;
use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, GpuTypeId, JobId, ReclaimDecision, ReclaimPolicy,
    ReclaimView, RunningJob, RunningScope, SpreadLimit, TypesView, VcId, WaitingJob, read_options,
};
use serde::Deserialize;

use borrowed::{Account, Borrowed};

mod borrowed;
mod newest_first;
#[cfg(test)]
mod reference;

/// Configuration of [`QuotaReclaim`], parsed from TOML.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaReclaimConfig {
    /// A running job younger than this many seconds is never stopped.
    pub min_run_s: u64,
    /// The most waiting jobs one round starts by reclaim.
    pub max_starts: u32,
}

impl Default for QuotaReclaimConfig {
    fn default() -> Self {
        QuotaReclaimConfig {
            min_run_s: 0,
            max_starts: 16,
        }
    }
}

/// Quota reclaim. See the [crate docs](crate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaReclaim {
    config: QuotaReclaimConfig,
}

impl QuotaReclaim {
    /// The configuration in use.
    pub fn config(&self) -> &QuotaReclaimConfig {
        &self.config
    }
}

impl Configure for QuotaReclaim {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: QuotaReclaimConfig = read_options("quota-reclaim", config)?;
        Ok(QuotaReclaim { config })
    }
}

impl ReclaimPolicy for QuotaReclaim {
    /// Only what each borrowing VC can give back, newest first, is ever
    /// reclaimable (the jobs [`ReclaimView::give_back`] takes, as the first
    /// list of candidates below is; [`ReclaimView::give_back_typed`] with
    /// the types): the host shows only those, and does not ask while no VC
    /// borrows.
    fn running_scope(&self) -> RunningScope {
        RunningScope::GiveBack {
            min_run_s: self.config.min_run_s,
        }
    }

    /// It takes the types: quotas per type, and the types jobs may run on.
    const GPU_TYPES: bool = true;

    fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision {
        self.decide(view, None)
    }

    fn reclaim_typed(&self, view: &ReclaimView, types: &TypesView) -> ReclaimDecision {
        self.decide(view, (!types.types.is_empty()).then_some(types))
    }
}

impl QuotaReclaim {
    /// The decision for `view`, with the GPU types if it was shown them.
    fn decide(&self, view: &ReclaimView, types: Option<&TypesView>) -> ReclaimDecision {
        // Nothing is borrowed (every VC within its quota, none without one
        // holding GPUs): nothing is reclaimable, so stop here (the common
        // case under binding quotas; a round then costs O(VCs) here).
        if !borrowing(view, types) {
            return ReclaimDecision::default();
        }
        let mut r = Reclaiming::new(view, types, self.config.min_run_s);
        let entitled = r.entitled();
        if entitled.is_empty() {
            return ReclaimDecision::default();
        }
        let mut all = r.reclaimable();
        for w in entitled.into_iter().take(64) {
            if r.decision.start.len() >= self.config.max_starts as usize || all.is_empty() {
                break;
            }
            if r.serve(w, &all) {
                all = r.reclaimable();
            }
        }
        r.decision
    }
}

/// Whether a VC holds more than its quota (or any GPU without one); with
/// quotas per type (and the types shown), more of a type than its nominal
/// quota of it.
fn borrowing(view: &ReclaimView, types: Option<&TypesView>) -> bool {
    view.vcs.iter().any(|v| match types {
        Some(t) if t.has_type_quotas(v.id) => t
            .vcs
            .iter()
            .any(|u| u.vc == v.id && u.held_gpus > u.nominal_gpus.unwrap_or(0)),
        _ => v.held_gpus > v.quota_gpus.unwrap_or(0),
    })
}

/// Account `a`'s quota in `view` (with `types`, if shown): its VC's pooled
/// quota, or its nominal quota of the type.
fn quota_of(view: &ReclaimView, types: Option<&TypesView>, a: Account) -> Option<u32> {
    match a {
        (vc, None) => view.vcs.get(vc.0 as usize).and_then(|v| v.quota_gpus),
        (vc, Some(t)) => types
            .and_then(|types| types.vc_type(vc, t))
            .and_then(|u| u.nominal_gpus),
    }
}

/// Where account `a` is among `vcs` VCs' accounts, `stride` per VC (its
/// pooled one, then one per type).
fn slot_of(stride: usize, vcs: usize, a: Account) -> Option<usize> {
    let vc = a.0.0 as usize;
    let t = a.1.map_or(0, |t| t.index() + 1);
    (vc < vcs && t < stride).then(|| vc * stride + t)
}

/// The account a running job's GPUs count on: its VC's quota of the type
/// it runs on if its VC has quotas per type (and the types are shown),
/// else its VC's pooled quota.
fn account_of(types: Option<&TypesView>, j: &RunningJob) -> Account {
    match types {
        Some(t) if t.has_type_quotas(j.vc) => (
            j.vc,
            Some(t.job(j.id).and_then(|t| t.running).unwrap_or_default()),
        ),
        _ => (j.vc, None),
    }
}

/// One reclaim decision under way: what each account holds counting what
/// it takes back and starts, and the servers' model.
struct Reclaiming<'v> {
    view: &'v ReclaimView,
    /// The GPU types, if the policy was shown them.
    types: Option<&'v TypesView>,
    /// GPUs each account holds, counting this round's stops and starts, by
    /// [`Reclaiming::slot`].
    held: Vec<u64>,
    /// Accounts per VC: its pooled one, then one per GPU type.
    stride: usize,
    /// The running jobs old enough to stop, borrowed work first found.
    borrowed: Borrowed<'v>,
    /// Jobs this round stops.
    taken: FxHashSet<JobId>,
    rooms: TypedRooms<'v>,
    decision: ReclaimDecision,
    /// (VC, type, limit, GPUs) of gangs that found no room on the type
    /// among every other VC's reclaimable jobs (no VC: among all of them):
    /// a gang of that limit needing as many GPUs or more finds none among
    /// as many candidates or fewer either, until a stop frees GPUs (the
    /// model only loses free GPUs otherwise). An entitled VC is within its
    /// quota of the type, so it has no reclaimable jobs of its own there
    /// and all its gangs share the entries without a VC.
    no_room: Vec<(Option<VcId>, Option<GpuTypeId>, SpreadLimit, u32)>,
    /// Scratch: the candidates of a gang whose VC has reclaimable jobs.
    filtered: Vec<&'v RunningJob>,
}

impl<'v> Reclaiming<'v> {
    /// The start of deciding for `view` (with `types`, if shown): jobs
    /// younger than `min_run_s` are never stopped.
    fn new(view: &'v ReclaimView, types: Option<&'v TypesView>, min_run_s: u64) -> Self {
        let stride = 1 + types.map_or(0, |t| t.types.len());
        let mut held = vec![0u64; view.vcs.len() * stride];
        for (v, at) in view.vcs.iter().zip((0..).step_by(stride)) {
            match types {
                Some(t) if t.has_type_quotas(v.id) => {
                    for u in t.vcs.iter().filter(|u| u.vc == v.id) {
                        if let Some(h) = held.get_mut(at + 1 + u.gpu_type.index()) {
                            *h = u64::from(u.held_gpus);
                        }
                    }
                }
                _ => held[at] = u64::from(v.held_gpus),
            }
        }
        Reclaiming {
            view,
            types,
            held,
            stride,
            // Newest first: they lose the least work.
            borrowed: Borrowed::new(
                view.running
                    .iter()
                    .filter(move |j| view.now_s.saturating_sub(j.started_s) >= min_run_s),
                |j| account_of(types, j),
            ),
            taken: FxHashSet::default(),
            rooms: TypedRooms::new(view, types),
            decision: ReclaimDecision::default(),
            no_room: Vec::new(),
            filtered: Vec::new(),
        }
    }

    /// Account `a`'s quota: its VC's pooled quota, or its nominal quota of
    /// the type.
    #[inline]
    fn quota(&self, a: Account) -> Option<u32> {
        quota_of(self.view, self.types, a)
    }

    /// Where account `a` is in `held` (`None` for a VC the view does not
    /// have, which holds nothing).
    #[inline]
    fn slot(&self, a: Account) -> Option<usize> {
        slot_of(self.stride, self.view.vcs.len(), a)
    }

    /// GPUs account `a` holds.
    #[inline]
    fn held(&self, a: Account) -> u64 {
        self.slot(a)
            .and_then(|i| self.held.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// Adds `gpus` (taken away if `add` is false) to account `a`'s GPUs.
    fn count(&mut self, a: Account, gpus: u32, add: bool) {
        if let Some(h) = self.slot(a).and_then(|i| self.held.get_mut(i)) {
            *h = if add {
                *h + u64::from(gpus)
            } else {
                h.saturating_sub(u64::from(gpus))
            };
        }
    }

    /// Whether VC `vc` has quotas per type (and the types are shown).
    fn per_type(&self, vc: VcId) -> bool {
        self.types.is_some_and(|t| t.has_type_quotas(vc))
    }

    /// GPUs VC `vc` holds in all.
    fn vc_held(&self, vc: VcId) -> u64 {
        let at = (vc.0 as usize).saturating_mul(self.stride);
        self.held.iter().skip(at).take(self.stride).sum()
    }

    /// The types (`None`: any, without the types) on which `w`'s VC's
    /// quota holds it beside what the VC holds, in `w`'s order of
    /// preference: with quotas per type, its allowed types of which the
    /// VC's nominal quota has room for it; pooled, all its allowed types if
    /// the VC's quota has room for it.
    fn entitled_on(&self, w: &WaitingJob) -> Vec<Option<GpuTypeId>> {
        let vc = w.job.vc;
        let fits = |a: Account| {
            self.quota(a)
                .is_some_and(|q| self.held(a) + u64::from(w.job.gpus) <= u64::from(q))
        };
        let Some(types) = self.types else {
            return if fits((vc, None)) {
                vec![None]
            } else {
                Vec::new()
            };
        };
        let allowed: Vec<GpuTypeId> = match types.job(w.job.id) {
            Some(t) if !t.allowed.is_empty() => t.allowed.clone(),
            _ => types.types.iter().map(|t| t.id).collect(),
        };
        if self.per_type(vc) {
            allowed
                .into_iter()
                .filter(|t| fits((vc, Some(*t))))
                .map(Some)
                .collect()
        } else if fits((vc, None)) {
            allowed.into_iter().map(Some).collect()
        } else {
            Vec::new()
        }
    }

    /// Whether `w`'s VC's quota holds it on some type it may use
    /// ([`Reclaiming::entitled_on`] is not empty), without listing them.
    fn is_entitled(&self, w: &WaitingJob) -> bool {
        let vc = w.job.vc;
        if !self.per_type(vc) {
            // Pooled: the VC's quota (a job may use some type).
            return self
                .quota((vc, None))
                .is_some_and(|q| self.held((vc, None)) + u64::from(w.job.gpus) <= u64::from(q));
        }
        !self.entitled_on(w).is_empty()
    }

    /// The account a job of VC `vc` started on type `on` counts on.
    fn account_on(&self, vc: VcId, on: Option<GpuTypeId>) -> Account {
        if self.per_type(vc) {
            (vc, on)
        } else {
            (vc, None)
        }
    }

    /// The waiting jobs entitled to GPUs taken back: waiting for GPUs and
    /// within their VC's quota with the job (of some type it may use, with
    /// quotas per type; a VC's holding only grows below its quota this
    /// round, and one over it is never taken below it, so this cannot
    /// change later), the VCs with the smallest share of their quota in use
    /// first, then oldest.
    fn entitled(&self) -> Vec<&'v WaitingJob> {
        let mut entitled: Vec<&WaitingJob> = self
            .view
            .waiting
            .iter()
            .filter(|w| w.reason.waits_for_gpus() && self.is_entitled(w))
            .collect();
        // (used, quota) compared as fractions by cross-multiplying; a VC's
        // quota is its pooled one (its nominal quotas summed).
        let share = |vc: VcId| {
            let quota = self.view.vcs.get(vc.0 as usize).and_then(|v| v.quota_gpus);
            (self.vc_held(vc), u64::from(quota.unwrap_or(0)).max(1))
        };
        sort::by(&mut entitled, &|a, b| {
            let (ua, qa) = share(a.job.vc);
            let (ub, qb) = share(b.job.vc);
            (ua * qb)
                .cmp(&(ub * qa))
                .then(a.job.submitted_s.cmp(&b.job.submitted_s))
                .then(a.job.id.cmp(&b.job.id))
        });
        entitled
    }

    /// Jobs that stay at or above their account's quota without them
    /// (newest first), counting what this round already takes back. A VC
    /// with entitled work is within its quota (of the type), so none of
    /// its own jobs there is ever among them; the list changes only when a
    /// job starts.
    fn reclaimable(&mut self) -> Vec<&'v RunningJob> {
        let (view, types, stride, held) = (self.view, self.types, self.stride, &self.held);
        let floor = |a: Account| u64::from(quota_of(view, types, a).unwrap_or(0));
        let held = |a: Account| {
            slot_of(stride, view.vcs.len(), a)
                .and_then(|i| held.get(i))
                .copied()
                .unwrap_or(0)
        };
        self.borrowed.reclaimable(held, &self.taken, floor)
    }

    /// Tries to start entitled job `w` by stopping some of `all` (the
    /// reclaimable jobs) of other VCs, on each type it is entitled on in
    /// turn; whether it stopped any.
    fn serve(&mut self, w: &WaitingJob, all: &[&'v RunningJob]) -> bool {
        for on in self.entitled_on(w) {
            if let Some(stop) = self.room_on(w, on, all) {
                if stop.is_empty() {
                    return false;
                }
                let account = self.account_on(w.job.vc, on);
                self.take_back(w, account, stop);
                return true;
            }
        }
        false
    }

    /// The jobs of `all` of other VCs (running on type `on`, if given) to
    /// stop for `w` to fit there, if it can.
    fn room_on(
        &mut self,
        w: &WaitingJob,
        on: Option<GpuTypeId>,
        all: &[&'v RunningJob],
    ) -> Option<Vec<JobId>> {
        let vc = w.job.vc;
        let known_none = self.no_room.iter().any(|(v, t, l, g)| {
            v.is_none_or(|v| v == vc) && *t == on && *l == w.limit && *g <= w.job.gpus
        });
        if known_none {
            return None;
        }
        // Every other VC's reclaimable jobs (on the type).
        let own = all.iter().any(|j| j.vc == vc);
        let types = self.types;
        let candidates: &[&RunningJob] = if own || on.is_some() {
            self.filtered.clear();
            self.filtered.extend(all.iter().filter(|j| {
                j.vc != vc
                    && on.is_none_or(|t| {
                        types.and_then(|ts| ts.job(j.id)).and_then(|x| x.running) == Some(t)
                    })
            }));
            &self.filtered
        } else {
            all
        };
        if candidates.is_empty() {
            return None;
        }
        let answer = self.rooms.of(on).make_room(w.job.gpus, w.limit, candidates);
        if answer.is_none() {
            self.no_room
                .push((own.then_some(vc), on, w.limit, w.job.gpus));
        }
        answer
    }

    /// Stops the jobs `stop` so that `w` starts, its GPUs counted on
    /// `account`.
    fn take_back(&mut self, w: &WaitingJob, account: Account, stop: Vec<JobId>) {
        for id in &stop {
            if let Some(j) = self.view.running.iter().find(|j| j.id == *id) {
                self.count(account_of(self.types, j), j.gpus, false);
            }
        }
        self.count(account, w.job.gpus, true);
        self.taken.extend(stop.iter().copied());
        self.decision.stop.extend(stop);
        self.decision.start.push(w.job.id);
        self.no_room.clear();
    }
}

gangway_plugin_sdk::export!(Reclaim, QuotaReclaim);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::Reclaim;
    use gangway_plugin_sdk::testing::SlotViews;
    use gangway_plugin_sdk::{
        ClusterSummary, Level, PendingJob, ServerId, ServerState, SpreadLimit, VcUsage, WaitReason,
    };
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn vc(id: u32, quota: Option<u32>, held: u32) -> VcUsage {
        VcUsage {
            id: VcId(id),
            quota_gpus: quota,
            weight: 1,
            held_gpus: held,
            ..VcUsage::default()
        }
    }

    fn job(id: u64, vc: u32, server: u32, gpus: u32, started_s: u64) -> RunningJob {
        RunningJob {
            id: JobId(id),
            vc: VcId(vc),
            gpus,
            started_s,
            parts: vec![(ServerId(server), gpus)],
            ..RunningJob::default()
        }
    }

    fn waiting(id: u64, vc: u32, gpus: u32) -> WaitingJob {
        WaitingJob {
            job: PendingJob {
                id: JobId(id),
                vc: VcId(vc),
                gpus,
                submitted_s: id,
                min_level: Level(1),
                min_servers: 1,
                ..PendingJob::default()
            },
            reason: WaitReason::NoCapacity,
            limit: SpreadLimit::level(Level(1)),
        }
    }

    fn view(vcs: Vec<VcUsage>, running: Vec<RunningJob>, waiting: Vec<WaitingJob>) -> ReclaimView {
        ReclaimView {
            now_s: 1_000,
            cluster: ClusterSummary {
                server_level: Level(1),
                ..ClusterSummary::default()
            },
            vcs,
            servers: (0..4)
                .map(|i| ServerState {
                    id: ServerId(i),
                    domain: 0,
                    gpus: 8,
                    free: 0,
                })
                .collect(),
            running,
            waiting,
        }
    }

    #[test]
    fn takes_back_only_the_borrowed_part() {
        // VC 0: quota 8, holds 24 (16 borrowed); VC 1: quota 24, holds 8.
        let v = view(
            vec![vc(0, Some(8), 24), vc(1, Some(24), 8)],
            vec![
                job(1, 0, 0, 8, 1),
                job(2, 0, 1, 8, 2),
                job(3, 0, 2, 8, 3),
                job(4, 1, 3, 8, 4),
            ],
            vec![waiting(10, 1, 8), waiting(11, 1, 8), waiting(12, 1, 8)],
        );
        let d = QuotaReclaim::default().reclaim(&v);
        // Two of VC 0's jobs are borrowed (newest first); its last 8 GPUs are its quota.
        assert_eq!(d.stop, vec![JobId(3), JobId(2)]);
        // VC 1 may grow to its quota: two starts; a third would need VC 0's own share.
        assert_eq!(d.start, vec![JobId(10), JobId(11)]);
    }

    #[test]
    fn over_quota_and_unquoted_vcs_claim_nothing() {
        let v = view(
            vec![vc(0, Some(8), 16), vc(1, None, 0)],
            vec![job(1, 0, 0, 8, 1), job(2, 0, 1, 8, 2)],
            vec![waiting(10, 0, 8), waiting(11, 1, 8)],
        );
        assert_eq!(
            QuotaReclaim::default().reclaim(&v),
            ReclaimDecision::default()
        );
    }

    #[test]
    fn young_jobs_are_left_alone() {
        let v = view(
            vec![vc(0, Some(0), 8), vc(1, Some(8), 0)],
            vec![job(1, 0, 0, 8, 990)],
            vec![waiting(10, 1, 8)],
        );
        let p = QuotaReclaim::from_config(b"min_run_s = 60").unwrap();
        assert!(p.reclaim(&v).stop.is_empty());
        assert_eq!(QuotaReclaim::default().reclaim(&v).stop, vec![JobId(1)]);
        assert!(QuotaReclaim::from_config(b"min_run = 1").is_err());
    }

    const A100: GpuTypeId = GpuTypeId(0);
    const V100: GpuTypeId = GpuTypeId(1);

    /// Types of two A100 servers (0, 1) and two V100 servers (2, 3); the
    /// jobs' types (`(job, allowed, running)`) and each VC's quotas per type
    /// (`(A100 held, nominal), (V100 held, nominal)`, `None`: pooled).
    fn types_of(
        jobs: &[(u64, Vec<GpuTypeId>, Option<GpuTypeId>)],
        vcs: &[Option<[(u32, u32); 2]>],
    ) -> TypesView {
        use gangway_plugin_sdk::{GpuTypeSummary, JobTypes, VcTypeUsage};
        let mut jobs: Vec<JobTypes> = jobs
            .iter()
            .map(|(id, allowed, running)| JobTypes {
                job: JobId(*id),
                allowed: allowed.clone(),
                running: *running,
                class: 0,
            })
            .collect();
        jobs.sort_by_key(|j| j.job);
        let mut uses = Vec::new();
        for (vc, quotas) in vcs.iter().enumerate() {
            for (t, gpu_type) in [A100, V100].into_iter().enumerate() {
                let (held, nominal) = quotas.map_or((0, None), |q| (q[t].0, Some(q[t].1)));
                uses.push(VcTypeUsage {
                    vc: VcId(vc as u32),
                    gpu_type,
                    held_gpus: held,
                    nominal_gpus: nominal,
                    borrowing_limit_gpus: None,
                });
            }
        }
        TypesView {
            types: [A100, V100]
                .map(|id| GpuTypeSummary {
                    id,
                    memory_gb: 80,
                    total_gpus: 16,
                    free_gpus: 0,
                })
                .to_vec(),
            jobs,
            vcs: uses,
            speeds: Vec::new(),
            servers: vec![A100, A100, V100, V100],
        }
    }

    #[test]
    fn takes_back_a_type_a_vc_borrows_though_it_is_within_its_quota_in_sum() {
        // VC 0: 8 A100s and 8 V100s nominal, runs 16 A100s: within its 16
        // in sum, 8 A100s over its nominal quota of them. VC 1: 8 A100s
        // nominal, waits for 8 A100s.
        let v = view(
            vec![vc(0, Some(16), 16), vc(1, Some(8), 0)],
            vec![job(1, 0, 0, 8, 1), job(2, 0, 1, 8, 2)],
            vec![waiting(10, 1, 8)],
        );
        let types = types_of(
            &[
                (1, vec![A100], Some(A100)),
                (2, vec![A100], Some(A100)),
                (10, vec![A100], None),
            ],
            &[Some([(16, 8), (0, 8)]), Some([(0, 8), (0, 0)])],
        );
        let p = QuotaReclaim::default();
        let d = p.reclaim_typed(&v, &types);
        assert_eq!((d.stop, d.start), (vec![JobId(2)], vec![JobId(10)]));
        // Blind to the types, nobody borrows.
        assert_eq!(p.reclaim(&v), ReclaimDecision::default());
        // What the host shows under its scope is that job alone.
        let ids: Vec<JobId> = v.give_back_typed(0, &types).iter().map(|j| j.id).collect();
        assert_eq!(ids, [JobId(2)]);
    }

    #[test]
    fn stops_only_jobs_on_a_type_the_waiting_job_may_use() {
        // VC 0 has no quota: all it runs is borrowed, the newest on an
        // A100. VC 1 (8 V100s nominal) waits for 8 V100s: the V100 job
        // goes, though older.
        let v = view(
            vec![vc(0, None, 24), vc(1, Some(8), 0)],
            vec![job(1, 0, 2, 8, 1), job(2, 0, 0, 8, 2), job(3, 0, 1, 8, 3)],
            vec![waiting(10, 1, 8)],
        );
        let types = types_of(
            &[
                (1, vec![V100], Some(V100)),
                (2, vec![A100], Some(A100)),
                (3, vec![A100], Some(A100)),
                (10, vec![V100], None),
            ],
            &[None, Some([(0, 0), (0, 8)])],
        );
        let p = QuotaReclaim::default();
        let d = p.reclaim_typed(&v, &types);
        assert_eq!((d.stop, d.start), (vec![JobId(1)], vec![JobId(10)]));
        assert_eq!(p.reclaim(&v).stop, vec![JobId(3)], "blind: the newest");
        // A waiting job its VC's quota of the type does not cover (no
        // A100s nominal) is not served.
        let mut a100 = types.clone();
        a100.jobs.last_mut().unwrap().allowed = vec![A100];
        assert_eq!(p.reclaim_typed(&v, &a100), ReclaimDecision::default());
    }

    proptest! {
        /// Shown only what its accounts can give back with the types (as
        /// the host shows a policy that takes them under its scope, the
        /// types of what is left beside), it decides as over every running
        /// job.
        #[test]
        fn decides_alike_on_what_the_vcs_can_give_back_by_type(
            (view, types) in gangway_plugin_sdk::testing::types::typed_views::<Reclaim>(),
            min_run_s in prop_oneof![Just(0u64), 0u64..2_000],
            max_starts in 1u32..20,
        ) {
            let policy = QuotaReclaim { config: QuotaReclaimConfig { min_run_s, max_starts } };
            let shown = view.as_give_back_typed(min_run_s, &types);
            let shown_types = types.shown_in(&view, &shown);
            prop_assert_eq!(policy.reclaim_typed(&shown, &shown_types), policy.reclaim_typed(&view, &types));
        }

        /// With the types, it stops only jobs whose account (the VC's
        /// quota of the job's type, or its pooled quota) is over its quota,
        /// starts each job once, and only on a type it may use that the
        /// stops free.
        #[test]
        fn stops_borrowers_by_type_for_entitled_jobs(
            (view, types) in gangway_plugin_sdk::testing::types::typed_views::<Reclaim>(),
        ) {
            let d = QuotaReclaim::default().reclaim_typed(&view, &types);
            let mut seen = HashSet::new();
            for id in d.stop.iter().chain(&d.start) {
                prop_assert!(seen.insert(*id), "{:?} twice", id);
            }
            for id in &d.stop {
                let j = view.running.iter().find(|j| j.id == *id).unwrap();
                let over = match account_of(Some(&types), j) {
                    (vc, Some(t)) => {
                        let u = types.vc_type(vc, t).unwrap();
                        u.held_gpus > u.nominal_gpus.unwrap()
                    }
                    (vc, None) => {
                        let v = &view.vcs[vc.0 as usize];
                        v.held_gpus > v.quota_gpus.unwrap_or(0)
                    }
                };
                prop_assert!(over, "{:?} stopped but its account is within its quota", id);
                let t = types.job(*id).and_then(|t| t.running);
                let usable = d.start.iter().any(|w| {
                    types.job(*w).is_some_and(|w| w.allowed.is_empty() || t.is_some_and(|t| w.allowed.contains(&t)))
                });
                prop_assert!(usable, "{:?} stopped on a type no started job may use", id);
            }
            prop_assert!(d.stop.is_empty() || !d.start.is_empty());
        }

        /// Whatever the view and options, the decision is the first
        /// implementation's.
        #[test]
        fn agrees_with_the_first_implementation(
            view in Reclaim::views(),
            min_run_s in prop_oneof![Just(0u64), 0u64..2_000],
            max_starts in 1u32..20,
        ) {
            let policy = QuotaReclaim { config: QuotaReclaimConfig { min_run_s, max_starts } };
            prop_assert_eq!(policy.reclaim(&view), reference::reclaim_reference(&policy, &view));
        }

        /// Shown only what its VCs can give back (as the host shows it
        /// under the scope it declares), it decides as over every running
        /// job.
        #[test]
        fn decides_alike_on_what_the_vcs_can_give_back(
            mut view in Reclaim::views(),
            min_run_s in prop_oneof![Just(0u64), 0u64..2_000],
            max_starts in 1u32..20,
            max_servers in prop::collection::vec(0u32..4, 64),
        ) {
            // Bounds on servers too (a delay ladder's), not only levels.
            for (w, m) in view.waiting.iter_mut().zip(max_servers) {
                w.limit.max_servers = m;
            }
            let policy = QuotaReclaim { config: QuotaReclaimConfig { min_run_s, max_starts } };
            prop_assert_eq!(policy.running_scope(), RunningScope::GiveBack { min_run_s });
            prop_assert_eq!(policy.reclaim(&view.as_give_back(min_run_s)), policy.reclaim(&view));
        }

        /// Whatever the view, it stops only running jobs of VCs over their
        /// quota, starts only waiting jobs within theirs, each once.
        #[test]
        fn stops_borrowers_for_entitled_jobs(view in Reclaim::views()) {
            let d = QuotaReclaim::default().reclaim(&view);
            let mut seen = HashSet::new();
            for id in d.stop.iter().chain(&d.start) {
                prop_assert!(seen.insert(*id), "{:?} twice", id);
            }
            for id in &d.stop {
                let j = view.running.iter().find(|j| j.id == *id).unwrap();
                let v = &view.vcs[j.vc.0 as usize];
                prop_assert!(v.held_gpus > v.quota_gpus.unwrap_or(0));
            }
            prop_assert!(d.stop.is_empty() || !d.start.is_empty());
        }
    }
}
