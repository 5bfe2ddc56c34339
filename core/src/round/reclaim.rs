//! The reclaim step: stop running jobs whole so that waiting jobs start.
//!
//! The core applies what is sound of a reclaim decision (which has passed
//! the slot's rules): it releases the stopped jobs' GPUs, starts each job to
//! start, in order, that now finds a placement within its spread limit, and
//! gives back their GPUs to the stopped jobs none of whose GPUs a started
//! job took: it never starts a gang it cannot complete, and never stops a
//! job it did not need. If no job starts, nothing is stopped. Only a stop of
//! a job that holds no GPUs fails the decision.

use gangway_plugin_sdk::Reclaim;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;

use gangway_plugin_sdk::{
    FairnessView, GpuTypeId, JobId, ReclaimDecision, ReclaimView, RunningJob, RunningScope,
    ServerState, VcId, VcUsage, WaitingJob,
};

use super::borrowing::Borrowing;
use super::{Placed, Preemption, Round, RoundReport};
use crate::freed_gpus::FreedGpus;
use crate::placement::PlacementChoice;
use crate::policy::invalid;
use crate::policy::{PolicyErrorKind, Stamp, ViewChanges};
use crate::state::Placement;

impl Round<'_> {
    /// Asks the reclaim slot (unless it is `none` or nothing waits) and
    /// applies its decision if it is sound. The slot is not asked when no
    /// waiting job could start even if every running job its view shows
    /// stopped: a decision then changes nothing (the core stops nothing
    /// unless a job starts).
    pub(super) fn reclaim(
        &mut self,
        view: &FairnessView,
        view_at: Stamp,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) {
        if self.policies.slot_mut::<Reclaim>().is_noop() || placed.reasons.is_empty() {
            return;
        }
        let vcs = self.book.vc_usage();
        let scope = self.policies.slot_mut::<Reclaim>().manifest().running;
        // A policy that sees only borrowed work is not asked while no VC
        // borrows (it could stop nothing).
        let borrowing = match scope {
            RunningScope::All => None,
            RunningScope::Borrowed | RunningScope::GiveBack { .. } => Some(self.borrowing(&vcs)),
        };
        if borrowing.as_ref().is_some_and(|b| !b.any()) {
            return;
        }
        let waiting = self.reclaim_waiting(view, placed, scope, &vcs, borrowing.as_ref());
        if waiting.is_empty() {
            return;
        }
        let running = self.reclaim_running(scope, &vcs, borrowing.as_ref(), &report.starts);
        if !self.could_start_any(&waiting, &running) {
            self.scratch.running = running;
            return;
        }
        let servers = self.reclaim_servers(&running, borrowing.is_some());
        let reclaim_view = ReclaimView {
            now_s: self.now,
            cluster: self.state.summary(),
            vcs,
            servers,
            running,
            waiting,
        };
        self.reclaim_with(&reclaim_view, view_at, placed, report);
        self.scratch.running = reclaim_view.running;
    }

    /// Who borrows, as the reclaim policy is shown it: per type for VCs
    /// with quotas per type if it takes the GPU types, else pooled.
    fn borrowing(&self, vcs: &[VcUsage]) -> Borrowing {
        if self.takes_types::<Reclaim>() {
            let n = self.state.topology().gpu_types().len();
            Borrowing::typed(vcs, self.vc_types(n), n)
        } else {
            Borrowing::pooled(vcs)
        }
    }

    /// The waiting jobs a reclaim policy of `scope` is shown: borrowed work
    /// (when only that is shown, `borrowing`) is taken back only for a job
    /// its VC's quota covers, and work is given back only to a job that
    /// waits for GPUs.
    #[inline]
    fn reclaim_waiting(
        &self,
        view: &FairnessView,
        placed: &Placed,
        scope: RunningScope,
        vcs: &[VcUsage],
        borrowing: Option<&Borrowing>,
    ) -> Vec<WaitingJob> {
        let mut waiting = self.waiting_jobs(view, placed);
        if let Some(b) = borrowing {
            let allowed = |id: &JobId| match b.per_type() {
                true => self.book.gpu_types.get(id).map_or(&[][..], |t| &t[..]),
                false => &[][..],
            };
            waiting.retain(|w| {
                vcs.get(w.job.vc.index())
                    .is_some_and(|v| b.covers(v, w.job.gpus, allowed(&w.job.id)))
            });
        }
        if matches!(scope, RunningScope::GiveBack { .. }) {
            waiting.retain(|w| w.reason.waits_for_gpus());
        }
        waiting
    }

    /// The running jobs a reclaim policy of `scope` is shown (only
    /// borrowed work, if it sees only that: `borrowing`), in the round's
    /// scratch memory; the jobs just `started` left out.
    #[inline]
    fn reclaim_running(
        &mut self,
        scope: RunningScope,
        vcs: &[VcUsage],
        borrowing: Option<&Borrowing>,
        started: &[crate::Start],
    ) -> Vec<RunningJob> {
        let mut running = std::mem::take(&mut self.scratch.running);
        match (scope, borrowing) {
            (RunningScope::GiveBack { min_run_s }, Some(b)) => {
                self.give_back_into(vcs, started, b, min_run_s, &mut running);
            }
            (RunningScope::Borrowed, Some(b)) => {
                let index = self.book.running_index();
                let shown = |r: &RunningJob| {
                    b.vc(r.vc) && (!b.per_type() || b.runs_borrowed(r.vc, index.type_of(r)))
                };
                self.running_jobs_into(started, shown, &mut running);
            }
            _ => self.running_jobs_into(started, |_| true, &mut running),
        }
        running
    }

    /// Whether any of `waiting` could start if every job of `running`
    /// stopped.
    #[inline]
    fn could_start_any(&self, waiting: &[WaitingJob], running: &[RunningJob]) -> bool {
        let freed = FreedGpus::of(self.state, running);
        waiting.iter().any(|w| {
            let gpus = self
                .book
                .get(&w.job.id)
                .map_or(w.job.gpus, |j| j.next_gpus());
            self.state.could_fit_with(gpus, w.limit, &freed)
        })
    }

    /// The servers a reclaim policy is shown: with only borrowed work
    /// shown (`borrowed_only`), those with free GPUs or a job of `running`
    /// (only they can make room).
    #[inline]
    fn reclaim_servers(&self, running: &[RunningJob], borrowed_only: bool) -> Vec<ServerState> {
        let mut servers = self.server_states();
        if borrowed_only {
            let mut hosting = vec![false; servers.len()];
            for (s, _) in running.iter().flat_map(|j| &j.parts) {
                if let Some(h) = hosting.get_mut(s.index()) {
                    *h = true;
                }
            }
            servers.retain(|s| s.free > 0 || hosting.get(s.id.index()).copied().unwrap_or(false));
        }
        servers
    }

    /// Asks the reclaim slot about `reclaim_view` and applies its decision
    /// if it is sound.
    fn reclaim_with(
        &mut self,
        reclaim_view: &ReclaimView,
        view_at: Stamp,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) {
        let changes = ViewChanges::new(self.book.changes(), view_at);
        // Contract 2.2: the GPU types of the view's waiting and running
        // jobs, for a policy that takes them.
        let types = self.takes_types::<Reclaim>().then(|| {
            let waiting = reclaim_view.waiting.iter().map(|w| w.job.id);
            let mut types =
                self.types_view(waiting.chain(reclaim_view.running.iter().map(|r| r.id)));
            if self.policies.slot::<Reclaim>().manifest().server_types {
                types.servers = self.server_types(&reclaim_view.servers);
            }
            types
        });
        let decided = self.policies.slot_mut::<Reclaim>().decide_typed(
            reclaim_view,
            types.as_ref(),
            &changes,
        );
        if let Some(e) = decided.error {
            report.policy_errors.push(e);
            return;
        }
        if decided.decision.stop.is_empty() && decided.decision.start.is_empty() {
            self.policies.slot_mut::<Reclaim>().settle(Ok(()));
            return;
        }
        let limits: HashMap<JobId, gangway_plugin_sdk::SpreadLimit> = reclaim_view
            .waiting
            .iter()
            .map(|w| (w.job.id, w.limit))
            .collect();
        let outcome = self.apply_reclaim(&decided.decision, &limits, placed, report);
        report
            .policy_errors
            .extend(self.policies.slot_mut::<Reclaim>().settle(outcome));
    }

    /// Allocates GPUs to each job of `start` that fits, in order, within
    /// its spread limit in `limits` and its VC's per-type quota (counting
    /// the jobs started before it here, which the book counts only once
    /// committed). Returns those it allocated, with where.
    fn start_within_caps(
        &mut self,
        start: &[JobId],
        limits: &HashMap<JobId, gangway_plugin_sdk::SpreadLimit>,
    ) -> Vec<(JobId, PlacementChoice)> {
        let mut started: Vec<(JobId, PlacementChoice)> = Vec::with_capacity(start.len());
        let mut taken: BTreeMap<(VcId, GpuTypeId), u32> = BTreeMap::new();
        for id in start {
            let Some(job) = self.book.get(id) else {
                continue;
            };
            let (gpus, vc) = (job.next_gpus(), job.spec.vc);
            let limit = limits.get(id).copied().unwrap_or_default();
            let Some(reach) = self.book.start_reach(id, gpus) else {
                continue;
            };
            let Some(choice) =
                self.state
                    .find_placement_in(gpus, limit, reach.at(), |_| false, |_| {})
            else {
                continue;
            };
            let t = choice.placement.gpu_type(self.state.topology());
            let more = taken.get(&(vc, t)).copied().unwrap_or(0);
            if more > 0 && !self.book.may_take(vc, t, gpus.saturating_add(more)) {
                continue;
            }
            if self.state.allocate(*id, &choice.placement).is_ok() {
                let t = taken.entry((vc, t)).or_default();
                *t = t.saturating_add(gpus);
                started.push((*id, choice));
            }
        }
        started
    }

    fn apply_reclaim(
        &mut self,
        d: &ReclaimDecision,
        limits: &HashMap<JobId, gangway_plugin_sdk::SpreadLimit>,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) -> Result<(), PolicyErrorKind> {
        let now = self.now;
        // Tentatively release the stopped jobs.
        let mut released: Vec<(JobId, Placement)> = Vec::with_capacity(d.stop.len());
        for id in &d.stop {
            match self.state.release(*id) {
                Ok(p) => released.push((*id, p)),
                Err(_) => {
                    self.undo(&released, &[]);
                    return Err(invalid(format!("stops {id}, which holds no GPUs")));
                }
            }
        }
        // Place the jobs to start, in order; skip those that do not fit.
        let started = self.start_within_caps(&d.start, limits);
        // Stopped jobs whose GPUs no started job took keep running.
        let (needed, unneeded): (Vec<_>, Vec<_>) = released
            .into_iter()
            .partition(|(_, p)| !started.is_empty() && self.state.any_owned(p));
        self.undo(&unneeded, &[]);
        let released = needed;
        // Commit: the stopped jobs are preempted and pending again.
        for (id, placement) in released {
            let ran_s = self.book.preempt(id, now, &placement);
            report.preempted.push(Preemption {
                job: id,
                placement,
                ran_s,
            });
        }
        for (id, choice) in started {
            placed.reasons.remove(&id);
            let start = self.start(id, &choice);
            report.starts.push(start);
        }
        Ok(())
    }
}

#[cfg(test)]
// Test workloads: small numbers the tests choose.
#[allow(clippy::arithmetic_side_effects, clippy::as_conversions)]
mod tests {
    use std::sync::{Arc, Mutex};

    use gangway_plugin_sdk::Reclaim;
    use gangway_plugin_sdk::{ReclaimPolicy, RunningScope, VcId};

    use super::*;
    use crate::policy::{BoxedBackend, Native, PolicySet};
    use crate::{JobSpec, Scheduler, ServerId, Topology};

    /// Records the VCs of the running jobs and the servers of every view it
    /// is shown, and stops nothing.
    struct Recorder {
        scope: RunningScope,
        seen: Arc<Mutex<Vec<Shown>>>,
    }

    /// What one view showed: the running jobs' VCs and the servers.
    type Shown = (Vec<VcId>, Vec<ServerId>);

    impl ReclaimPolicy for Recorder {
        fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push((
                    view.running.iter().map(|j| j.vc).collect(),
                    view.servers.iter().map(|s| s.id).collect(),
                ));
            }
            ReclaimDecision::default()
        }
        fn running_scope(&self) -> RunningScope {
            self.scope
        }
    }

    /// Three 8-GPU servers: VC `a` (quota `a_quota`) runs an 8-GPU job and
    /// a 4-GPU job (on the third server) and waits with an 8-GPU one; VC `b`
    /// (quota `b_quota`) runs one job. Returns what the reclaim policy was shown in
    /// two rounds: the running jobs' VCs and the servers.
    fn shown(scope: RunningScope, a_quota: u32, b_quota: Option<u32>) -> Vec<Shown> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = Recorder {
            scope,
            seen: Arc::clone(&seen),
        };
        let backend: BoxedBackend<Reclaim> = Box::new(Native::new("recorder", recorder));
        let set = PolicySet::fallbacks().with(backend);
        let mut sched = Scheduler::with_policies(Topology::uniform(1, 3, 8).unwrap(), set);
        let a = sched.virtual_cluster("a");
        let b = sched.virtual_cluster("b");
        sched.set_quota(a, Some(a_quota));
        sched.set_quota(b, b_quota);
        let job = |id, vc, gpus, t| JobSpec {
            id: JobId(id),
            vc,
            user: 0,
            gpus,
            submitted_s: t,
        };
        sched.submit(job(1, a, 8, 0)).unwrap();
        sched.submit(job(2, b, 8, 0)).unwrap();
        sched.round(10).unwrap();
        sched.submit(job(4, a, 4, 1)).unwrap();
        sched.round(11).unwrap();
        sched.submit(job(3, a, 8, 12)).unwrap();
        sched.round(20).unwrap();
        sched.round(30).unwrap();
        sched.check_invariants().unwrap();
        seen.lock().unwrap().clone()
    }

    #[test]
    fn a_borrowed_scope_shows_only_borrowed_jobs_and_skips_rounds_without_any() {
        let (a, b) = (VcId(0), VcId(1));
        let vcs =
            |seen: Vec<Shown>| -> Vec<Vec<VcId>> { seen.into_iter().map(|(v, _)| v).collect() };
        // `b` has no quota: its job is borrowed work; `a`'s are not shown.
        let borrowed = shown(RunningScope::Borrowed, 20, None);
        assert_eq!(vcs(borrowed.clone()), vec![vec![b], vec![b]]);
        // Nor are the servers that neither have free GPUs nor run a shown
        // job: `a`'s full server. The half-free server and `b`'s are.
        let (sa, sb, shared) = (ServerId(0), ServerId(1), ServerId(2));
        for (_, servers) in &borrowed {
            assert_eq!(servers, &vec![sb, shared]);
        }
        // Every running job and every server with the default scope.
        let all = shown(RunningScope::All, 20, None);
        assert_eq!(vcs(all.clone()), vec![vec![a, b, a], vec![a, b, a]]);
        assert!(all.iter().all(|(_, s)| s == &vec![sa, sb, shared]));
        // Nobody borrows: the policy is not asked at all.
        assert!(shown(RunningScope::Borrowed, 20, Some(8)).is_empty());
        assert_eq!(shown(RunningScope::All, 20, Some(8)).len(), 2);
        // `b` borrows, but the waiting job would take `a` past its quota
        // (12 held + 8 > 12): no job to take borrowed work back for.
        assert!(shown(RunningScope::Borrowed, 12, None).is_empty());
        assert_eq!(shown(RunningScope::All, 12, None).len(), 2);
    }

    /// Records every view it is shown, whole, with the round's time, and
    /// stops nothing.
    struct ViewRecorder {
        scope: RunningScope,
        seen: Arc<Mutex<Vec<ReclaimView>>>,
    }

    impl ReclaimPolicy for ViewRecorder {
        fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(view.clone());
            }
            ReclaimDecision::default()
        }
        fn running_scope(&self) -> RunningScope {
            self.scope
        }
    }

    /// (VC, GPUs, submit offset, run time) of each job of a workload.
    type Workload = Vec<(u32, u32, u64, u64)>;

    /// Submits a workload of (VC index, GPUs, submit offset, run time,
    /// request) jobs, ids from 1; returns each job's (run time, id) and the
    /// last submit time.
    fn submit_all(
        sched: &mut Scheduler,
        vcs: &[VcId],
        jobs: impl Iterator<Item = (u32, u32, u64, u64, crate::GpuRequest)>,
    ) -> (Vec<(u64, JobId)>, u64) {
        let mut ends: Vec<(u64, JobId)> = Vec::new();
        let mut at = 0u64;
        for (i, (vc, gpus, gap, run, request)) in jobs.enumerate() {
            at += gap;
            let id = JobId(i as u64 + 1);
            let spec = JobSpec {
                id,
                vc: vcs[vc as usize],
                user: 0,
                gpus,
                submitted_s: at,
            };
            sched.submit_requesting(spec, &request).unwrap();
            ends.push((run, id));
        }
        (ends, at)
    }

    /// Runs rounds every 10 s until 400 s after `last_submit`, ending each
    /// job of `ends` (run time, id) its run time after it started, and
    /// checks the invariants.
    fn drive(sched: &mut Scheduler, ends: &[(u64, JobId)], last_submit: u64) {
        let mut started: std::collections::BTreeMap<JobId, u64> = Default::default();
        for t in (0..last_submit + 400).step_by(10) {
            for (run, id) in ends {
                if let Some(s) = started.get(id)
                    && t >= s + run
                    && sched.job(*id).is_some_and(|j| j.final_status().is_none())
                {
                    let _ = sched.end_attempt(*id, t, crate::AttemptEnd::Passed);
                    started.remove(id);
                }
            }
            let report = sched.round(t).unwrap();
            for s in &report.starts {
                started.insert(s.job, t);
            }
            for p in &report.preempted {
                started.remove(&p.job);
            }
        }
        sched.check_invariants().unwrap();
    }

    /// The reclaim views of a workload on 2 racks x 4 servers x 8 GPUs, 3
    /// VCs (quotas 8, 24, none), under `scope`: rounds every 10 s, each job
    /// ending after its run time.
    fn views_of(scope: RunningScope, jobs: &Workload) -> Vec<ReclaimView> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = ViewRecorder {
            scope,
            seen: Arc::clone(&seen),
        };
        let backend: BoxedBackend<Reclaim> = Box::new(Native::new("recorder", recorder));
        let set = PolicySet::fallbacks().with(backend);
        let mut sched = Scheduler::with_policies(Topology::uniform(2, 4, 8).unwrap(), set);
        let vcs: Vec<VcId> = ["a", "b", "c"]
            .iter()
            .map(|n| sched.virtual_cluster(n))
            .collect();
        sched.set_quota(vcs[0], Some(8));
        sched.set_quota(vcs[1], Some(24));
        let any = || crate::GpuRequest::default();
        let workload = jobs
            .iter()
            .map(|&(vc, g, gap, run)| (vc, g, gap, run, any()));
        let (ends, at) = submit_all(&mut sched, &vcs, workload);
        drive(&mut sched, &ends, at);
        seen.lock().unwrap().clone()
    }

    /// Records every view it is shown with its types, and stops nothing:
    /// a reclaim policy that takes the GPU types (contract 2.2).
    struct TypedRecorder {
        scope: RunningScope,
        seen: Arc<Mutex<Vec<(ReclaimView, gangway_plugin_sdk::TypesView)>>>,
    }

    impl ReclaimPolicy for TypedRecorder {
        const GPU_TYPES: bool = true;
        fn reclaim(&self, _: &ReclaimView) -> ReclaimDecision {
            ReclaimDecision::default()
        }
        fn reclaim_typed(
            &self,
            view: &ReclaimView,
            types: &gangway_plugin_sdk::TypesView,
        ) -> ReclaimDecision {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push((view.clone(), types.clone()));
            }
            ReclaimDecision::default()
        }
        fn running_scope(&self) -> RunningScope {
            self.scope
        }
    }

    /// (VC, GPUs, submit offset, run time, request: any, only `a`, only
    /// `b`) of each job of a typed workload.
    type TypedWorkload = Vec<(u32, u32, u64, u64, u8)>;

    /// The typed reclaim views of a workload on two racks of 4 servers x 8
    /// GPUs, one of type `a` and one of type `b`, and 3 VCs: two with
    /// quotas per type (`a` 8 + `b` 8 with no borrowing limit; `a` 16 + `b`
    /// 4 borrowing at most 8 `b`), one pooled without a quota; rounds every
    /// 10 s, each job ending after its run time.
    fn typed_views_of(
        scope: RunningScope,
        jobs: &TypedWorkload,
    ) -> Vec<(ReclaimView, gangway_plugin_sdk::TypesView)> {
        use crate::{GpuRequest, TopologyBuilder, TypeQuota};
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = TypedRecorder {
            scope,
            seen: Arc::clone(&seen),
        };
        let backend: BoxedBackend<Reclaim> = Box::new(Native::new("recorder", recorder));
        let set = PolicySet::fallbacks().with(backend);
        let mut b = TopologyBuilder::new();
        let ta = b.add_gpu_type("a", 80).unwrap();
        let tb = b.add_gpu_type("b", 80).unwrap();
        for (r, t) in [(0, ta), (1, tb)] {
            let rack = b.add_domain(b.root(), format!("r{r}")).unwrap();
            for s in 0..4 {
                b.add_server_of_type(rack, format!("s{r}{s}"), 8, t)
                    .unwrap();
            }
        }
        let mut sched = Scheduler::with_policies(b.build().unwrap(), set);
        let vcs: Vec<VcId> = ["a", "b", "c"]
            .iter()
            .map(|n| sched.virtual_cluster(n))
            .collect();
        let q = TypeQuota::new;
        sched.set_type_quotas(vcs[0], [(ta, q(8, None)), (tb, q(8, None))].into());
        sched.set_type_quotas(vcs[1], [(ta, q(16, None)), (tb, q(4, Some(8)))].into());
        let request = |req: u8| match req {
            0 => GpuRequest::default(),
            1 => GpuRequest::types(["a"]),
            _ => GpuRequest::types(["b"]),
        };
        let workload = jobs
            .iter()
            .map(|&(vc, g, gap, run, req)| (vc, g, gap, run, request(req)));
        let (ends, at) = submit_all(&mut sched, &vcs, workload);
        drive(&mut sched, &ends, at);
        seen.lock().unwrap().clone()
    }

    /// VC `a` (quotas per type: 8 `a`, 8 `b`) runs 16 GPUs of type `a` and
    /// none of `b`: within its 16 in sum, but 8 `a` over its nominal quota
    /// of `a`. VC `b` (8 `a`) waits for 8 `a`. A policy that takes the
    /// types is shown `a`'s newest `a` job to give back; one that does not
    /// sees pooled quotas, by which nobody borrows, and is not asked.
    #[test]
    fn a_vc_over_one_types_nominal_quota_gives_it_back_per_type() {
        use crate::{GpuRequest, TopologyBuilder, TypeQuota};
        let run = |typed: bool| {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let scope = RunningScope::GiveBack { min_run_s: 0 };
            let backend: BoxedBackend<Reclaim> = if typed {
                Box::new(Native::new(
                    "typed",
                    TypedRecorder {
                        scope,
                        seen: Arc::clone(&seen),
                    },
                ))
            } else {
                let views = Arc::new(Mutex::new(Vec::new()));
                Box::new(Native::new("pooled", ViewRecorder { scope, seen: views }))
            };
            let mut b = TopologyBuilder::new();
            let ta = b.add_gpu_type("a", 80).unwrap();
            let tb = b.add_gpu_type("b", 80).unwrap();
            let rack = b.add_domain(b.root(), "r").unwrap();
            b.add_server_of_type(rack, "a0", 8, ta).unwrap();
            b.add_server_of_type(rack, "a1", 8, ta).unwrap();
            b.add_server_of_type(rack, "b0", 8, tb).unwrap();
            let set = PolicySet::fallbacks().with(backend);
            let mut sched = Scheduler::with_policies(b.build().unwrap(), set);
            let (va, vb) = (sched.virtual_cluster("a"), sched.virtual_cluster("b"));
            let q = TypeQuota::new;
            sched.set_type_quotas(va, [(ta, q(8, None)), (tb, q(8, None))].into());
            sched.set_type_quotas(vb, [(ta, q(8, None))].into());
            let spec = |id, vc, t| JobSpec {
                id: JobId(id),
                vc,
                user: 0,
                gpus: 8,
                submitted_s: t,
            };
            let only_a = GpuRequest::types(["a"]);
            sched.submit_requesting(spec(1, va, 0), &only_a).unwrap();
            sched.submit_requesting(spec(2, va, 1), &only_a).unwrap();
            sched.round(10).unwrap();
            sched.submit_requesting(spec(3, vb, 11), &only_a).unwrap();
            let report = sched.round(20).unwrap();
            sched.check_invariants().unwrap();
            assert!(report.preempted.is_empty(), "the recorders stop nothing");
            seen.lock().unwrap().clone()
        };
        let typed = run(true);
        assert_eq!(typed.len(), 1, "asked once, at 20");
        let (view, types) = &typed[0];
        assert_eq!(
            view.running.iter().map(|j| j.id).collect::<Vec<_>>(),
            [JobId(2)]
        );
        assert_eq!(
            view.waiting.iter().map(|w| w.job.id).collect::<Vec<_>>(),
            [JobId(3)]
        );
        // The servers with free GPUs or running job 2 (not `a0`, which job 1
        // fills), and their types in the same order.
        let ids: Vec<u32> = view.servers.iter().map(|s| s.id.0).collect();
        assert_eq!(ids, [1, 2]);
        assert_eq!(types.servers, [GpuTypeId(0), GpuTypeId(1)]);
        assert!(run(false).is_empty());
    }

    proptest::proptest! {
        /// Under `GiveBack`, a round shows what the SDK's definition takes
        /// of the view `Borrowed` shows in the same round (running jobs and
        /// servers), and asks the policy in no round `Borrowed` skips.
        #[test]
        fn a_give_back_view_is_the_borrowed_view_given_back(
            jobs in proptest::collection::vec((0u32..3, 1u32..17, 0u64..30, 5u64..200), 1..40),
            min_run_s in proptest::prop_oneof![proptest::strategy::Just(0u64), 0u64..60],
        ) {
            let borrowed = views_of(RunningScope::Borrowed, &jobs);
            let given = views_of(RunningScope::GiveBack { min_run_s }, &jobs);
            let mut at = borrowed.iter();
            for view in &given {
                let full = at.find(|v| v.now_s == view.now_s);
                proptest::prop_assert!(full.is_some(), "asked at {} only under GiveBack", view.now_s);
                proptest::prop_assert_eq!(view, &full.unwrap().as_give_back(min_run_s));
            }
        }

        /// The same to a policy that takes the GPU types, on two types and
        /// quotas per type: the SDK's typed definition
        /// (`ReclaimView::give_back_typed`) of the typed `Borrowed` view,
        /// with the types of what is left; and `Borrowed` shows only work
        /// of a VC over its quota of the job's type (or over its pooled
        /// quota), for a job within its VC's quota of some allowed type.
        #[test]
        fn a_typed_give_back_view_is_the_typed_borrowed_view_given_back(
            jobs in proptest::collection::vec(
                (0u32..3, 1u32..17, 0u64..30, 5u64..200, 0u8..3), 1..40),
            min_run_s in proptest::prop_oneof![proptest::strategy::Just(0u64), 0u64..60],
        ) {
            let borrowed = typed_views_of(RunningScope::Borrowed, &jobs);
            let given = typed_views_of(RunningScope::GiveBack { min_run_s }, &jobs);
            for (view, types) in &borrowed {
                for j in &view.running {
                    let t = types.job(j.id).and_then(|t| t.running).unwrap();
                    let borrows = match types.vc_type(j.vc, t).unwrap() {
                        u if u.nominal_gpus.is_some() => u.held_gpus > u.nominal_gpus.unwrap(),
                        _ => view.vcs[j.vc.index()].held_gpus > view.vcs[j.vc.index()].quota_gpus.unwrap_or(0),
                    };
                    proptest::prop_assert!(borrows, "{:?} shown at {} but not borrowed", j.id, view.now_s);
                }
                proptest::prop_assert_eq!(view.servers.len(), types.servers.len());
            }
            let mut at = borrowed.iter();
            for (view, types) in &given {
                let full = at.find(|(v, _)| v.now_s == view.now_s);
                proptest::prop_assert!(full.is_some(), "asked at {} only under GiveBack", view.now_s);
                let (full, full_types) = full.unwrap();
                let expected = full.as_give_back_typed(min_run_s, full_types);
                proptest::prop_assert_eq!(view, &expected);
                proptest::prop_assert_eq!(types, &full_types.shown_in(full, &expected));
            }
        }
    }
}
