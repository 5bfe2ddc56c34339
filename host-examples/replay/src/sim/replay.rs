//! The replay of one trace: the events (arrivals, attempt ends, server
//! failures, rounds) in time order, and what each round's decisions do to
//! the recorded attempts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use gangway_core::policy::{PolicySet, SlotEvent};
use gangway_core::{
    AttemptEnd, JobId, JobSpec, RetryAction, Scheduler, ServerId, Topology, WaitReason,
};
use gangway_plugin_sdk::Reclaim;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::meter::Meter;
use super::typed_work::TypedWork;
use super::{
    DelayEvents, JobOutcome, Quarantine, QueuedBehind, RunResult, SimConfig, SimError,
    locality_slowdown,
};
use crate::queued_time::QueuedTime;
use crate::trace::{Outcome, Trace};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    // Order within one instant: failures and ends free capacity before the round.
    ServerUp(u32),
    ServerDown(u32),
    AttemptEnd { job: u32, generation: u32 },
    Arrival(u32),
    Round,
}

/// What the replay knows of one job's current attempt.
#[derive(Clone, Copy, Debug, Default)]
struct Live {
    /// The recorded attempt it runs (or runs next).
    attempt: usize,
    /// Bumped when an attempt is interrupted: older end events are stale.
    generation: u32,
    /// When the running attempt ends (as scheduled).
    ends_at: u64,
    /// Seconds of the recorded attempt left after a preemption.
    remaining: Option<u64>,
    /// The running attempt is a probe that fails (else one that survives).
    probe: Option<bool>,
    /// GPUs it runs on.
    gpus: u32,
    /// When the running attempt started (or last moved).
    started_s: u64,
    /// When its current run (from the start, a checkpoint or a move) began.
    run_from_s: u64,
}

/// A replay under way.
pub(super) struct Replay<'t> {
    pub(super) sched: Scheduler,
    trace: &'t Trace,
    cfg: &'t SimConfig,
    heap: BinaryHeap<Reverse<(u64, Event)>>,
    live: Vec<Live>,
    finish: Vec<Option<(u64, Outcome)>>,
    /// Jobs ended for good (entries of `finish` set).
    pub(super) finished: usize,
    extra: Vec<Extra>,
    round_at: Option<u64>,
    rng: ChaCha8Rng,
    rounds: u64,
    skipped_rounds: u64,
    policy_errors: u64,
    quarantines: Vec<Quarantine>,
    in_rounds: Duration,
    reclaim_active: bool,
    max_server_gpus: u32,
    /// The `queued` wait of every job, split by what its VC waited behind.
    queued: QueuedTime,
    /// Trace jobs arrived so far (the next arrival's index).
    pub(super) next_arrival: usize,
    /// Rounds run or skipped when something last ran or was still to arrive.
    rounds_at_idle: u64,
    /// Per job, its work where its run time depends on the GPU type (empty
    /// without a throughput table).
    typed: Vec<Option<TypedWork>>,
    /// Per job, the GPU type of its current or last attempt (empty on a
    /// cluster of one type).
    gpu_type: Vec<Option<u8>>,
    /// GPU-seconds used per GPU type (empty on a cluster of one type).
    type_gpu_s: Vec<u64>,
    /// Per job of typed work, its class: the row of its speeds per type
    /// given to the scheduler (jobs of the same speeds share one).
    classes: Vec<u32>,
}

/// Per-job counters the scheduler does not keep.
#[derive(Clone, Copy, Debug, Default)]
struct Extra {
    restart_gpu_s: u64,
    attempts_avoided: u32,
    saved_gpu_s: u64,
    passing_lost: bool,
    probes: u32,
    events: DelayEvents,
    slowdown_gpu_s: u64,
    used_gpu_s: u64,
    /// The wait reason of its last round, while it waits.
    last_reason: Option<WaitReason>,
    /// The round (count) that last showed it to fairness.
    shown_round: u64,
    /// Its virtual cluster's index.
    vc: u32,
    /// Seconds it waited `queued`, by what its VC's queue waited for
    /// ([`QueuedBehind`]), attributed round by round.
    behind_s: [u64; QueuedBehind::COUNT],
    /// Seconds its attempts ran (charged when an attempt ends or stops).
    ran_s: u64,
}

/// Splits `total` seconds in proportion to `weights` (largest share gets
/// the rounding remainder); all of it to `Unattributed` without weights.
fn split_queued(total: u64, weights: &[u64; QueuedBehind::COUNT]) -> [u64; QueuedBehind::COUNT] {
    let mut out = [0u64; QueuedBehind::COUNT];
    let sum: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if total == 0 {
        return out;
    }
    if sum == 0 {
        out[QueuedBehind::Unattributed.index()] = total;
        return out;
    }
    let mut given = 0u64;
    for (o, w) in out.iter_mut().zip(weights) {
        // total * w / sum <= total: fits in u64.
        *o = u64::try_from(u128::from(total) * u128::from(*w) / sum).unwrap_or(0);
        given = given.saturating_add(*o);
    }
    let largest = (0..QueuedBehind::COUNT)
        .max_by_key(|&i| (weights[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    out[largest] = out[largest].saturating_add(total.saturating_sub(given));
    out
}

impl Replay<'_> {
    /// Records the policies the round just quarantined.
    fn note_quarantines(&mut self, t: u64, events: &[(gangway_core::Slot, SlotEvent)]) {
        for (slot, event) in events {
            if let SlotEvent::Quarantined {
                module,
                restored,
                error,
            } = event
            {
                tracing::warn!(
                    slot = slot.as_str(),
                    module = %module,
                    restored = %restored,
                    "quarantined at {t} s after repeated failures: {error}"
                );
                self.quarantines.push(Quarantine {
                    at_s: t,
                    slot: *slot,
                    module: module.clone(),
                    restored: restored.clone(),
                    error: error.kind.to_string(),
                });
            }
        }
    }

    /// Charges job `i`'s GPU time from its attempt's start (or last charge) to `t`.
    fn charge_use(&mut self, i: usize, t: u64) {
        let live = &mut self.live[i];
        let used = t.saturating_sub(live.started_s) * u64::from(live.gpus);
        if let Some(Some(ty)) = self.gpu_type.get(i)
            && let Some(u) = self.type_gpu_s.get_mut(usize::from(*ty))
        {
            *u = u.saturating_add(used);
        }
        self.extra[i].used_gpu_s += used;
        self.extra[i].ran_s += t.saturating_sub(live.started_s);
        live.started_s = t;
    }

    fn schedule_round(&mut self, at: u64) {
        if self.round_at.is_none_or(|r| at < r) {
            self.round_at = Some(at);
            self.heap.push(Reverse((at, Event::Round)));
        }
    }

    fn grid(&self, t: u64) -> u64 {
        match self.cfg.round_interval_s {
            0 => t,
            i => t.div_ceil(i).saturating_mul(i),
        }
    }

    fn end_event(&mut self, i: usize, at: u64) {
        self.live[i].ends_at = at;
        let generation = self.live[i].generation;
        self.heap.push(Reverse((
            at,
            Event::AttemptEnd {
                job: i as u32,
                generation,
            },
        )));
    }

    fn handle(&mut self, t: u64, event: Event) -> Result<(), SimError> {
        match event {
            Event::Arrival(i) => self.arrive(i as usize, t)?,
            Event::AttemptEnd { job, generation } => {
                let i = job as usize;
                if generation != self.live[i].generation {
                    return Ok(()); // interrupted, preempted or moved since
                }
                self.attempt_ended(i, t)?;
            }
            Event::ServerDown(s) => self.server_down(s, t)?,
            Event::ServerUp(s) => self.server_up(s, t)?,
            Event::Round => return self.round_due(t),
        }
        let at = self.grid(t);
        self.schedule_round(at);
        Ok(())
    }

    /// Trace job `i` arrives at `t`: submitted to the scheduler.
    fn arrive(&mut self, i: usize, t: u64) -> Result<(), SimError> {
        let job = &self.trace.jobs[i];
        let vc = self.sched.virtual_cluster(&job.vc);
        self.extra[i].vc = vc.0;
        let spec = JobSpec {
            id: JobId(i as u64),
            vc,
            user: 0,
            gpus: job.gpus,
            submitted_s: t,
        };
        let submitted = match self.typed.get(i) {
            Some(Some(w)) => {
                let request = w.request(self.sched.topology());
                self.sched.submit_requesting(spec, &request)
            }
            _ => self.sched.submit(spec),
        };
        submitted.map_err(|source| SimError::Rejected {
            job: job.name.clone(),
            source,
        })?;
        if let Some(&class) = self.classes.get(i) {
            self.sched.set_job_class(JobId(i as u64), class)?;
        }
        Ok(())
    }

    /// Gives each job of typed work a class, its speeds per type, and the
    /// scheduler those speeds (what a policy that takes the GPU types is
    /// shown), classes numbered in order of first appearance.
    fn give_classes(&mut self) {
        if self.typed.is_empty() {
            return;
        }
        let mut rows: std::collections::HashMap<Vec<u32>, u32> = std::collections::HashMap::new();
        let mut speeds = Vec::new();
        self.classes = self
            .typed
            .iter()
            .map(|w| {
                let row = w.as_ref().map(TypedWork::speeds).unwrap_or_default();
                let next = u32::try_from(rows.len()).unwrap_or(u32::MAX);
                *rows.entry(row.clone()).or_insert_with(|| {
                    speeds.push(gangway_plugin_sdk::ClassSpeeds {
                        class: next,
                        per_type: row,
                    });
                    next
                })
            })
            .collect();
        self.sched.set_class_speeds(speeds);
    }

    /// Server `s` fails at `t`: the attempts on it stop, and it comes back
    /// after the repair time.
    fn server_down(&mut self, s: u32, t: u64) -> Result<(), SimError> {
        let hit = self.sched.server_down(ServerId(s), t)?;
        for id in hit {
            self.interrupt(id.0 as usize, t);
        }
        self.heap.push(Reverse((
            t.saturating_add(self.cfg.server_repair_s),
            Event::ServerUp(s),
        )));
        Ok(())
    }

    /// Job `i`'s attempt is interrupted by a server failure at `t`: what is
    /// left of its run from its last checkpoint (a probe, and a job without
    /// checkpoints, starts over).
    fn interrupt(&mut self, i: usize, t: u64) {
        self.charge_use(i, t);
        let every = self.cfg.checkpoint_s;
        let live = &mut self.live[i];
        live.generation += 1;
        let probe = live.probe.take().is_some();
        let run = live.ends_at.saturating_sub(live.run_from_s);
        let done = t.saturating_sub(live.run_from_s).min(run);
        let kept = if every == 0 || probe {
            0
        } else {
            done - done % every
        };
        if let Some(Some(w)) = self.typed.get_mut(i) {
            let progress = w.progress_s(t);
            let saved = if every == 0 || probe {
                0
            } else {
                progress - progress % every
            };
            w.stop(t, Some(saved));
        }
        live.remaining = (kept > 0 || live.remaining.is_some()).then(|| run.saturating_sub(kept));
    }

    /// Server `s` is back at `t`; with failures on, its next failure is drawn.
    fn server_up(&mut self, s: u32, t: u64) -> Result<(), SimError> {
        self.sched.server_up(ServerId(s))?;
        if let Some(mtbf) = self.cfg.server_mtbf_s {
            let next = exp_sample(&mut self.rng, mtbf);
            self.heap
                .push(Reverse((t.saturating_add(next), Event::ServerDown(s))));
        }
        Ok(())
    }

    /// A round is due at `t`: run it, unless an earlier one superseded it
    /// or no waiting job can start.
    fn round_due(&mut self, t: u64) -> Result<(), SimError> {
        if self.round_at != Some(t) {
            return Ok(()); // superseded by an earlier round
        }
        self.round_at = None;
        // While fewer GPUs are free than the smallest waiting gang, no job
        // can start: skip the round (waits keep their last reason), unless
        // the retry slot has failures to decide about or a reclaim policy
        // might make room.
        let free = self.sched.state().free_gpus();
        if !self.reclaim_active
            && self.sched.awaiting_retry_len() == 0
            && self.sched.smallest_pending_gpus().is_some_and(|g| g > free)
        {
            self.skipped_rounds += 1;
            if self.cfg.idle_tick_s > 0 {
                self.schedule_round(t.saturating_add(self.cfg.idle_tick_s));
            }
            return Ok(());
        }
        self.round(t)
    }

    /// The running attempt of job `i` ended at `t`: how, the trace (and
    /// whether it was a probe) says.
    fn attempt_ended(&mut self, i: usize, t: u64) -> Result<(), SimError> {
        self.charge_use(i, t);
        let attempts = &self.trace.jobs[i].attempts;
        let k = self.live[i].attempt.min(attempts.len() - 1);
        let a = attempts[k];
        let last = k + 1 >= attempts.len();
        let id = JobId(i as u64);
        if let Some(Some(w)) = self.typed.get_mut(i)
            && self.live[i].probe.is_none()
        {
            w.finish();
        }
        let end = match self.live[i].probe.take() {
            // The probe survived its time: the full gang runs attempt k.
            Some(false) => AttemptEnd::Passed,
            // The probe failed as attempt k would have.
            Some(true) => {
                self.live[i].attempt += 1;
                AttemptEnd::Failed {
                    class: a.class,
                    last,
                }
            }
            None => {
                self.live[i].remaining = None;
                match a.outcome {
                    Outcome::Passed => AttemptEnd::Passed,
                    Outcome::Killed => AttemptEnd::Killed,
                    Outcome::Failed => {
                        self.live[i].attempt += 1;
                        AttemptEnd::Failed {
                            class: a.class,
                            last,
                        }
                    }
                }
            }
        };
        self.sched.end_attempt(id, t, end)?;
        if let Some(status) = self.sched.job(id).and_then(|j| j.final_status()) {
            self.finish[i] = Some((t, Outcome::from(status)));
            self.finished += 1;
        }
        Ok(())
    }

    /// Adds to each job what it accrued while `queued`.
    fn take_queued(&mut self, closed: Vec<(u32, [u64; QueuedBehind::COUNT])>) {
        for (j, got) in closed {
            if let Some(e) = self.extra.get_mut(j as usize) {
                for (b, g) in e.behind_s.iter_mut().zip(got) {
                    *b = b.saturating_add(g);
                }
            }
        }
    }

    fn round(&mut self, t: u64) -> Result<(), SimError> {
        let started = Instant::now();
        let report = self.sched.round(t)?;
        self.in_rounds += started.elapsed();
        self.rounds += 1;
        self.policy_errors += report.policy_errors.len() as u64;
        self.note_quarantines(t, &report.slot_events);
        self.queued.charge(t);
        let vc_head = self.note_waits(&report.waiting);
        self.note_queued(&report.waiting, &vc_head);
        for (id, action) in &report.retries {
            if *action == RetryAction::GiveUp {
                self.give_up(id.0 as usize, t);
            }
        }
        for p in &report.preempted {
            self.preempted(p.job.0 as usize, t);
        }
        for m in &report.migrations {
            self.moved(m.job.0 as usize, &m.to, t);
        }
        for s in &report.starts {
            self.start(s, t);
        }
        if self.sched.pending_len() > 0 && self.cfg.idle_tick_s > 0 {
            self.schedule_round(t.saturating_add(self.cfg.idle_tick_s));
        }
        if let Some(next) = self.sched.next_retry_s() {
            let at = self.grid(next.max(t.saturating_add(1)));
            self.schedule_round(at);
        }
        Ok(())
    }

    /// Records each waiting job's reason (counting the delay events it
    /// enters), and returns, per VC, the reason its earliest shown job
    /// (ids follow submit order) waits for, if one waits for a reason of
    /// its own.
    #[inline]
    fn note_waits(&mut self, waiting: &[(JobId, WaitReason)]) -> Vec<Option<WaitReason>> {
        let mut vc_head: Vec<Option<WaitReason>> = Vec::new();
        for &(id, reason) in waiting {
            let e = &mut self.extra[id.0 as usize];
            if e.last_reason != Some(reason) {
                match reason {
                    WaitReason::FairShare => e.events.fair_share += 1,
                    WaitReason::Fragmentation => e.events.fragmentation += 1,
                    _ => {}
                }
            }
            e.last_reason = Some(reason);
            e.shown_round = self.rounds;
            if reason != WaitReason::Queued {
                let vc = e.vc as usize;
                if vc_head.len() <= vc {
                    vc_head.resize(vc + 1, None);
                }
                vc_head[vc].get_or_insert(reason);
            }
        }
        vc_head
    }

    /// Each pending job that waits `queued` (beyond its VC's view window,
    /// or shown as queued) until the next round, behind what its VC's queue
    /// waits for (`vc_head`).
    #[inline]
    fn note_queued(&mut self, waiting: &[(JobId, WaitReason)], vc_head: &[Option<WaitReason>]) {
        let shown: Vec<u32> = waiting
            .iter()
            .filter(|(_, r)| *r != WaitReason::Queued)
            .filter_map(|(id, _)| u32::try_from(id.0).ok())
            .collect();
        let extra = &self.extra;
        let closed = self.queued.note(&self.sched, vc_head, shown, |j| {
            extra.get(j as usize).map_or(0, |e| e.vc)
        });
        self.take_queued(closed);
    }

    /// The retry policy gave up on job `i` at `t`: it ends as failed, and
    /// the recorded attempts it did not run are saved.
    fn give_up(&mut self, i: usize, t: u64) {
        let attempts = &self.trace.jobs[i].attempts;
        let gpus = u64::from(self.trace.jobs[i].gpus);
        let rest = &attempts[self.live[i].attempt.min(attempts.len())..];
        let e = &mut self.extra[i];
        e.attempts_avoided += rest.len() as u32;
        e.saved_gpu_s += rest.iter().map(|a| a.run_s * gpus).sum::<u64>();
        e.passing_lost = rest.last().is_some_and(|a| a.outcome == Outcome::Passed);
        self.finish[i] = Some((t, Outcome::Failed));
        self.finished += 1;
    }

    /// Job `i` was preempted at `t`: it keeps the rest of its run for later
    /// (a probe starts over).
    fn preempted(&mut self, i: usize, t: u64) {
        self.charge_use(i, t);
        let live = &mut self.live[i];
        live.generation += 1;
        if live.probe.take().is_none() {
            live.remaining = Some(live.ends_at.saturating_sub(t));
            if let Some(Some(w)) = self.typed.get_mut(i) {
                w.stop(t, None);
            }
        }
    }

    /// Job `i` was moved onto `to` at `t`: its run goes on there after a
    /// restart (on its GPU type: a move keeps it).
    fn moved(&mut self, i: usize, to: &gangway_core::PlacementChoice, t: u64) {
        let restart = self.cfg.restart_s;
        let gpus = to.placement.gpu_count();
        self.charge_use(i, t);
        self.live[i].generation += 1;
        self.live[i].gpus = gpus;
        self.extra[i].restart_gpu_s += u64::from(gpus) * restart;
        let mut at = self.live[i].ends_at.saturating_add(restart);
        let ty = self.gpu_type.get(i).copied().flatten();
        if let (Some(Some(w)), Some(ty)) = (self.typed.get_mut(i), ty)
            && self.live[i].probe.is_none()
        {
            w.stop(t, None);
            at = t.saturating_add(w.start(usize::from(ty), to.servers > 1, t, restart));
        }
        self.live[i].run_from_s = t;
        self.end_event(i, at);
    }

    /// A job starts at `t` as `s` says: its attempt's end is scheduled.
    #[inline]
    fn start(&mut self, s: &gangway_core::Start, t: u64) {
        let i = s.job.0 as usize;
        let gpus = s.choice.placement.gpu_count();
        if let Some(slot) = self.gpu_type.get_mut(i) {
            let topo = self.sched.topology();
            *slot = s
                .choice
                .placement
                .parts
                .first()
                .and_then(|p| topo.server(p.server))
                .map(|sv| sv.gpu_type.0);
        }
        self.live[i].gpus = gpus;
        self.live[i].started_s = t;
        self.live[i].run_from_s = t;
        self.extra[i].last_reason = None;
        let run = match s.probe_s {
            Some(probe_s) => self.probe_run(i, probe_s),
            None => self.attempt_run(i, gpus, s.choice.servers),
        };
        // A probe's time is the policy's (bounded by the contract); the
        // clock saturates rather than wraps whatever it is.
        self.end_event(i, t.saturating_add(run));
    }

    /// The recorded attempt job `i` runs (or runs next).
    #[inline]
    fn current_attempt(&self, i: usize) -> crate::trace::Attempt {
        let attempts = &self.trace.jobs[i].attempts;
        attempts[self.live[i].attempt.min(attempts.len() - 1)]
    }

    /// How long job `i`'s probe of `probe_s` runs: the attempt's own time
    /// if the attempt fails within it.
    #[inline]
    fn probe_run(&mut self, i: usize, probe_s: u64) -> u64 {
        let a = self.current_attempt(i);
        self.extra[i].probes += 1;
        let fails = a.outcome == Outcome::Failed && a.run_s <= probe_s;
        self.live[i].probe = Some(fails);
        if fails { a.run_s } else { probe_s }
    }

    /// How long job `i`'s attempt runs on `gpus` GPUs over `servers`
    /// servers: the rest after a restart if it was preempted, else its
    /// recorded time, longer if spread (locality cost).
    #[inline]
    fn attempt_run(&mut self, i: usize, gpus: u32, servers: u32) -> u64 {
        let ty = self.gpu_type.get(i).copied().flatten();
        if let (Some(Some(w)), Some(ty)) = (self.typed.get_mut(i), ty) {
            let resumed = self.live[i].remaining.is_some();
            let restart = if resumed { self.cfg.restart_s } else { 0 };
            self.extra[i].restart_gpu_s += u64::from(gpus) * restart;
            return w.start(
                usize::from(ty),
                servers > 1,
                self.live[i].started_s,
                restart,
            );
        }
        if let Some(left) = self.live[i].remaining {
            // Resumed after a preemption: the rest, after a restart.
            let restart = self.cfg.restart_s;
            self.extra[i].restart_gpu_s += u64::from(gpus) * restart;
            return left.saturating_add(restart);
        }
        let a = self.current_attempt(i);
        let slow = if self.cfg.locality_cost {
            let min = gpus.div_ceil(self.max_server_gpus.max(1));
            locality_slowdown(servers, min)
        } else {
            1.0
        };
        let scaled = (a.run_s as f64 * slow).round() as u64;
        self.extra[i].slowdown_gpu_s += (scaled - a.run_s.min(scaled)) * u64::from(gpus);
        scaled
    }
}

/// Rounds with nothing running and nothing arriving after which waiting jobs
/// are declared never started.
const STALLED_ROUNDS: u64 = 1_000;

fn exp_sample(rng: &mut ChaCha8Rng, mean: u64) -> u64 {
    (-(1.0 - rng.random::<f64>()).ln() * mean as f64)
        .round()
        .max(1.0) as u64
}

impl<'t> Replay<'t> {
    /// A replay of `trace` on `topology` with `policies`, its VCs made (in
    /// order of first appearance, with their quotas) and, with failures on,
    /// each server's first failure drawn.
    pub(super) fn new(
        topology: Topology,
        trace: &'t Trace,
        policies: PolicySet,
        cfg: &'t SimConfig,
    ) -> Self {
        let n = trace.jobs.len();
        let servers = topology.servers().len();
        let reclaim_active = !policies.slot::<Reclaim>().is_noop();
        let max_server_gpus = topology.max_server_gpus();
        let typed = match &cfg.throughputs {
            Some(table) => trace
                .jobs
                .iter()
                .map(|j| {
                    j.work
                        .as_ref()
                        .map(|w| TypedWork::new(w, j.gpus, &topology, table))
                })
                .collect(),
            None => Vec::new(),
        };
        let (gpu_type, type_gpu_s) = if topology.is_heterogeneous() {
            (vec![None; n], vec![0; topology.gpu_types().len()])
        } else {
            (Vec::new(), Vec::new())
        };
        let mut sim = Replay {
            sched: Scheduler::with_policies(topology, policies),
            trace,
            cfg,
            heap: BinaryHeap::new(),
            live: vec![Live::default(); n],
            finish: vec![None; n],
            finished: 0,
            extra: vec![Extra::default(); n],
            round_at: None,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            rounds: 0,
            skipped_rounds: 0,
            queued: QueuedTime::new(n),
            policy_errors: 0,
            quarantines: Vec::new(),
            in_rounds: Duration::ZERO,
            reclaim_active,
            max_server_gpus,
            next_arrival: 0,
            rounds_at_idle: 0,
            classes: Vec::new(),
            typed,
            gpu_type,
            type_gpu_s,
        };
        sim.give_classes();
        sim.sched.set_placement_strategy(cfg.placement);
        sim.sched.set_view_window(cfg.view_window);
        for job in &trace.jobs {
            let vc = sim.sched.virtual_cluster(&job.vc);
            sim.sched.set_quota(vc, cfg.quotas.get(&job.vc).copied());
        }
        if let Some(mtbf) = cfg.server_mtbf_s {
            for s in 0..servers {
                let at = exp_sample(&mut sim.rng, mtbf);
                sim.heap.push(Reverse((at, Event::ServerDown(s as u32))));
            }
        }
        sim
    }

    /// When the next event happens (an arrival or one in the heap), if any.
    #[inline]
    pub(super) fn next_time(&self) -> Option<u64> {
        let heap_t = self.heap.peek().map(|Reverse((t, _))| *t);
        let arrival_t = self.trace.jobs.get(self.next_arrival).map(|j| j.submit_s);
        match (heap_t, arrival_t) {
            (None, None) => None,
            (Some(h), None) => Some(h),
            (None, Some(a)) => Some(a),
            (Some(h), Some(a)) => Some(h.min(a)),
        }
    }

    /// Handles all events at time `t`: heap events (ends, failures) first,
    /// then arrivals, then the round (the heap orders Round last).
    #[inline]
    pub(super) fn handle_instant(&mut self, t: u64) -> Result<(), SimError> {
        while let Some(Reverse((ht, ev))) = self.heap.peek().copied() {
            if ht != t || ev == Event::Round {
                break;
            }
            self.heap.pop();
            self.handle(t, ev)?;
        }
        while self
            .trace
            .jobs
            .get(self.next_arrival)
            .is_some_and(|j| j.submit_s == t)
        {
            self.handle(t, Event::Arrival(self.next_arrival as u32))?;
            self.next_arrival += 1;
        }
        while let Some(Reverse((ht, ev))) = self.heap.peek().copied() {
            if ht != t {
                break;
            }
            self.heap.pop();
            self.handle(t, ev)?;
        }
        Ok(())
    }

    /// Whether the replay is over: nothing is left to happen, or all
    /// arrivals are in and nothing runs, and either nothing waits or what
    /// waits has made no progress for [`STALLED_ROUNDS`] rounds (it will be
    /// reported as never started).
    #[inline]
    pub(super) fn over(&mut self) -> bool {
        let all_arrived = self.next_arrival >= self.trace.jobs.len();
        if self.heap.is_empty() && all_arrived {
            return true;
        }
        if all_arrived && self.sched.state().allocations().is_empty() {
            let idle = self.sched.pending_len() == 0 && self.sched.retrying_len() == 0;
            let stalled = self.rounds + self.skipped_rounds > self.rounds_at_idle + STALLED_ROUNDS;
            return idle || stalled;
        }
        self.rounds_at_idle = self.rounds + self.skipped_rounds;
        false
    }

    /// The replay's outcome, once over (`meter` having measured it, from
    /// `clock`'s start).
    pub(super) fn result(mut self, meter: Meter, clock: Instant) -> Result<RunResult, SimError> {
        let span = meter.span();
        // Jobs still waiting at the end have accrued since their last charge.
        let end_s = self.sched.last_round_s();
        let closed = self.queued.finish(end_s);
        self.take_queued(closed);
        let jobs = (0..self.trace.jobs.len())
            .map(|i| self.outcome(i, end_s))
            .collect();
        // A broken invariant would be a bug in the core: fail loudly.
        self.sched.check_invariants()?;
        let gpu_types = self.type_uses();
        let vc_list = self.sched.virtual_clusters();
        Ok(RunResult {
            jobs,
            warm: self.trace.warm,
            vcs: vc_list.iter().map(|v| v.name.clone()).collect(),
            quotas: vc_list.iter().map(|v| v.quota_gpus).collect(),
            vc_mean_held: meter.vc_integral.iter().map(|x| x / span).collect(),
            gpu_allocation_mean: meter.alloc_integral / span,
            samples: meter.samples,
            policy_errors: self.policy_errors,
            quarantines: self.quarantines,
            rounds: self.rounds,
            skipped_rounds: self.skipped_rounds,
            elapsed: clock.elapsed(),
            in_rounds: self.in_rounds,
            gpu_types,
        })
    }

    /// Each GPU type and its use (none on a cluster of one type).
    fn type_uses(&self) -> Vec<super::TypeUse> {
        let topo = self.sched.topology();
        self.type_gpu_s
            .iter()
            .enumerate()
            .map(|(i, used)| {
                let t = gangway_core::GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX));
                super::TypeUse {
                    name: topo.gpu_types()[i].name.clone(),
                    gpus: topo.type_gpus(t),
                    used_gpu_s: *used,
                }
            })
            .collect()
    }

    /// What happened to trace job `i`, the replay having ended at `end_s`.
    fn outcome(&self, i: usize, end_s: u64) -> JobOutcome {
        let tj = &self.trace.jobs[i];
        let rec = self.sched.job(JobId(i as u64));
        let e = self.extra[i];
        let wait_s = rec.map_or([0; 7], |r| r.wait_at(end_s).seconds);
        JobOutcome {
            gpus: tj.gpus,
            vc: rec.map_or(0, |r| r.spec.vc.0 as usize),
            submit_s: tj.submit_s,
            first_start_s: rec.and_then(|r| r.first_start_s),
            finish_s: self.finish[i].map(|f| f.0),
            status: self.finish[i].map(|f| f.1),
            wait_s,
            waited_s: self.waited(i, end_s),
            queued_behind_s: split_queued(wait_s[WaitReason::Queued.index()], &e.behind_s),
            first_servers: rec.and_then(|r| r.first_placement.map(|p| p.0)),
            failed_gpu_s: rec.map_or(0, |r| r.failed_gpu_s),
            preemptions: rec.map_or(0, |r| r.preemptions),
            migrations: rec.map_or(0, |r| r.migrations),
            restart_gpu_s: e.restart_gpu_s,
            attempts_avoided: e.attempts_avoided,
            saved_gpu_s: e.saved_gpu_s,
            passing_lost: e.passing_lost,
            probes: e.probes,
            delay_events: e.events,
            used_gpu_s: e.used_gpu_s,
            attempts: rec.map_or(0, |r| r.attempts),
            spread_slowdown_gpu_s: e.slowdown_gpu_s,
            gpu_type: self.gpu_type.get(i).copied().flatten(),
        }
    }

    /// Seconds between job `i`'s submission and its end (or `end_s`) that
    /// it did not run.
    fn waited(&self, i: usize, end_s: u64) -> u64 {
        let rec = self.sched.job(JobId(i as u64));
        let until = self.finish[i].map_or(end_s, |f| f.0);
        let running = match rec.map(|r| &r.state) {
            Some(gangway_core::JobState::Running { .. }) if self.finish[i].is_none() => {
                end_s.saturating_sub(self.live[i].started_s)
            }
            _ => 0,
        };
        until
            .saturating_sub(self.trace.jobs[i].submit_s)
            .saturating_sub(self.extra[i].ran_s)
            .saturating_sub(running)
    }
}
