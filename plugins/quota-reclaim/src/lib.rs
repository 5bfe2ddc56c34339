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

use rustc_hash::{FxHashMap, FxHashSet};

use gangway_plugin_sdk::room::Room;
use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, JobId, ReclaimDecision, ReclaimPolicy, ReclaimView,
    RunningJob, RunningScope, SpreadLimit, VcId, WaitingJob, read_options,
};
use serde::Deserialize;

use borrowed::Borrowed;

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
    /// list of candidates below is): the host shows only those, and does
    /// not ask while no VC borrows.
    fn running_scope(&self) -> RunningScope {
        RunningScope::GiveBack {
            min_run_s: self.config.min_run_s,
        }
    }

    fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision {
        // Nothing is borrowed (every VC within its quota, none without one
        // holding GPUs): nothing is reclaimable, so stop here (the common
        // case under binding quotas; a round then costs O(VCs) here).
        let borrowing = view.vcs.iter().any(|v| match v.quota_gpus {
            Some(q) => v.held_gpus > q,
            None => v.held_gpus > 0,
        });
        if !borrowing {
            return ReclaimDecision::default();
        }
        let mut r = Reclaiming::new(view, self.config.min_run_s);
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

/// One reclaim decision under way: what each VC holds counting what it
/// takes back and starts, and the servers' model.
struct Reclaiming<'v> {
    view: &'v ReclaimView,
    /// GPUs each VC holds, counting this round's stops and starts.
    held: FxHashMap<VcId, u64>,
    /// The running jobs old enough to stop, borrowed work first found.
    borrowed: Borrowed<'v>,
    /// Jobs this round stops.
    taken: FxHashSet<JobId>,
    room: Room,
    decision: ReclaimDecision,
    /// (VC, limit, GPUs) of gangs that found no room among every other
    /// VC's reclaimable jobs (no VC: among all of them): a gang of that
    /// limit needing as many GPUs or more finds none among as many
    /// candidates or fewer either, until a stop frees GPUs (the model only
    /// loses free GPUs otherwise). An entitled VC is within its quota, so
    /// it has no reclaimable jobs of its own and all its gangs share the
    /// entries without a VC.
    no_room: Vec<(Option<VcId>, SpreadLimit, u32)>,
    /// Scratch: the candidates of a gang whose VC has reclaimable jobs.
    filtered: Vec<&'v RunningJob>,
}

impl<'v> Reclaiming<'v> {
    /// The start of deciding for `view`: jobs younger than `min_run_s` are
    /// never stopped.
    fn new(view: &'v ReclaimView, min_run_s: u64) -> Self {
        Reclaiming {
            view,
            held: view
                .vcs
                .iter()
                .map(|v| (v.id, u64::from(v.held_gpus)))
                .collect(),
            // Newest first: they lose the least work.
            borrowed: Borrowed::new(
                view.running
                    .iter()
                    .filter(move |j| view.now_s.saturating_sub(j.started_s) >= min_run_s),
            ),
            taken: FxHashSet::default(),
            room: Room::new(&view.servers, view.cluster.server_level),
            decision: ReclaimDecision::default(),
            no_room: Vec::new(),
            filtered: Vec::new(),
        }
    }

    /// VC `vc`'s quota.
    #[inline]
    fn quota(&self, vc: VcId) -> Option<u32> {
        self.view.vcs.get(vc.0 as usize).and_then(|v| v.quota_gpus)
    }

    /// GPUs VC `vc` holds.
    #[inline]
    fn held(&self, vc: VcId) -> u64 {
        self.held.get(&vc).copied().unwrap_or(0)
    }

    /// The waiting jobs entitled to GPUs taken back: waiting for GPUs and
    /// within their VC's quota with the job (a VC's holding only grows
    /// below its quota this round, and one over it is never taken below
    /// it, so this cannot change later), the VCs with the smallest share
    /// of their quota in use first, then oldest.
    fn entitled(&self) -> Vec<&'v WaitingJob> {
        let mut entitled: Vec<&WaitingJob> = self
            .view
            .waiting
            .iter()
            .filter(|w| {
                w.reason.waits_for_gpus()
                    && self.quota(w.job.vc).is_some_and(|q| {
                        self.held(w.job.vc) + u64::from(w.job.gpus) <= u64::from(q)
                    })
            })
            .collect();
        // (used, quota) compared as fractions by cross-multiplying.
        let share = |vc: VcId| (self.held(vc), u64::from(self.quota(vc).unwrap_or(0)).max(1));
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

    /// Jobs that stay at or above their VC's quota without them (newest
    /// first), counting what this round already takes back. A VC with
    /// entitled work is within its quota, so none of its own jobs is ever
    /// among them; the list changes only when a job starts.
    fn reclaimable(&mut self) -> Vec<&'v RunningJob> {
        let view = self.view;
        let floor = |vc: VcId| {
            u64::from(
                view.vcs
                    .get(vc.0 as usize)
                    .and_then(|v| v.quota_gpus)
                    .unwrap_or(0),
            )
        };
        self.borrowed.reclaimable(&self.held, &self.taken, floor)
    }

    /// Tries to start entitled job `w` by stopping some of `all` (the
    /// reclaimable jobs) of other VCs; whether it stopped any.
    fn serve(&mut self, w: &WaitingJob, all: &[&'v RunningJob]) -> bool {
        let vc = w.job.vc;
        let Some(q) = self.quota(vc) else {
            return false;
        };
        if self.held(vc) + u64::from(w.job.gpus) > u64::from(q) {
            return false;
        }
        let known_none = self
            .no_room
            .iter()
            .any(|(v, l, g)| v.is_none_or(|v| v == vc) && *l == w.limit && *g <= w.job.gpus);
        if known_none {
            return false;
        }
        // Every other VC's reclaimable jobs.
        let own = all.iter().any(|j| j.vc == vc);
        let candidates: &[&RunningJob] = if own {
            self.filtered.clear();
            self.filtered
                .extend(all.iter().filter(|j| j.vc != vc).copied());
            &self.filtered
        } else {
            all
        };
        if candidates.is_empty() {
            return false;
        }
        match self.room.make_room(w.job.gpus, w.limit, candidates) {
            Some(stop) if stop.is_empty() => false,
            Some(stop) => {
                self.take_back(w, stop);
                true
            }
            None => {
                self.no_room.push((own.then_some(vc), w.limit, w.job.gpus));
                false
            }
        }
    }

    /// Stops the jobs `stop` so that `w` starts.
    fn take_back(&mut self, w: &WaitingJob, stop: Vec<JobId>) {
        for id in &stop {
            if let Some(j) = self.view.running.iter().find(|j| j.id == *id) {
                let h = self.held.entry(j.vc).or_insert(0);
                *h = h.saturating_sub(u64::from(j.gpus));
            }
        }
        *self.held.entry(w.job.vc).or_insert(0) += u64::from(w.job.gpus);
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

    proptest! {
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
