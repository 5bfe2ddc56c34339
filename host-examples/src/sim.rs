//! The discrete-event replay: arrivals, attempt ends, retries and optional
//! server failures drive a real [`Scheduler`]; the scheduler only decides when
//! and where each recorded attempt runs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use gangway_core::policy::PolicySet;
use gangway_core::{
    AttemptEnd, JobSpec, PlacementStrategy, Scheduler, SchedulerError, ServerId, Topology,
};
use gangway_plugin_sdk::JobId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::trace::{Outcome, Trace};

/// Knobs of one replay.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Rounds run on a grid of this many seconds, after anything changed
    /// (Philly's scheduler, like YARN's, works in periodic passes). 0 = a
    /// round at every event time.
    pub round_interval_s: u64,
    /// While jobs wait, a round runs at least this often even if nothing
    /// changed, so locality can relax with waiting time.
    pub idle_tick_s: u64,
    /// Mean time between failures of one server, in seconds (`None`: no failures).
    pub server_mtbf_s: Option<u64>,
    /// How long a failed server stays down.
    pub server_repair_s: u64,
    /// Seed for the failure process.
    pub seed: u64,
    /// GPU quota per virtual cluster name (absent: unlimited).
    pub quotas: BTreeMap<String, u32>,
    /// How placement search breaks ties.
    pub placement: PlacementStrategy,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_interval_s: 10,
            idle_tick_s: 60,
            server_mtbf_s: None,
            server_repair_s: 2 * 3600,
            seed: 0,
            quotas: BTreeMap::new(),
            placement: PlacementStrategy::BestFit,
        }
    }
}

/// What happened to one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// GPUs.
    pub gpus: u32,
    /// Virtual cluster index into [`RunResult::vcs`].
    pub vc: usize,
    /// Submit time.
    pub submit_s: u64,
    /// First attempt's start.
    pub first_start_s: Option<u64>,
    /// When it finished for good.
    pub finish_s: Option<u64>,
    /// Final status, `None` if it never finished.
    pub status: Option<Outcome>,
    /// Seconds of fair-share delay (all its waits).
    pub fair_share_s: u64,
    /// Seconds of fragmentation delay (all its waits).
    pub fragmentation_s: u64,
    /// Servers its first attempt spanned.
    pub first_servers: Option<u32>,
    /// GPU-seconds of attempts that failed or were interrupted.
    pub failed_gpu_s: u64,
}

/// A sample of the cluster over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Time.
    pub t_s: u64,
    /// GPUs allocated.
    pub allocated: u32,
    /// GPUs held per VC.
    pub per_vc: Vec<u32>,
}

/// The outcome of one replay.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Per job, in trace order.
    pub jobs: Vec<JobOutcome>,
    /// VC names, indexed by [`JobOutcome::vc`].
    pub vcs: Vec<String>,
    /// VC quotas used.
    pub quotas: Vec<Option<u32>>,
    /// Time-weighted mean GPUs held per VC over the arrival window.
    pub vc_mean_held: Vec<f64>,
    /// Time-weighted mean of allocated / online GPUs over the arrival window.
    pub gpu_allocation_mean: f64,
    /// Periodic samples for plots.
    pub samples: Vec<Sample>,
    /// Policy calls that failed and fell back to the default.
    pub policy_errors: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Rounds skipped because fewer GPUs were free than the smallest waiting gang.
    pub skipped_rounds: u64,
    /// Wall-clock time of the replay loop (never written to report.json).
    pub elapsed: Duration,
    /// Wall-clock time inside `Scheduler::round`.
    pub in_rounds: Duration,
}

/// A replay that could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scheduler refused a job (e.g. larger than the cluster).
    #[error("trace job {job}: {source}")]
    Rejected {
        /// The trace job's name.
        job: String,
        /// The scheduler's reason.
        source: SchedulerError,
    },
    /// An event the scheduler refused: a replay bug, reported rather than hidden.
    #[error("replay event refused: {0}")]
    Scheduler(#[from] SchedulerError),
    /// The scheduler's state broke an invariant.
    #[error("scheduler invariant broken: {0}")]
    Invariant(#[from] gangway_core::InvariantViolation),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    // Order within one instant: failures and ends free capacity before the round.
    ServerUp(u32),
    ServerDown(u32),
    AttemptEnd { job: u32, generation: u32 },
    Arrival(u32),
    Round,
}

struct Replay<'t> {
    sched: Scheduler,
    trace: &'t Trace,
    cfg: &'t SimConfig,
    heap: BinaryHeap<Reverse<(u64, Event)>>,
    next_attempt: Vec<usize>,
    generation: Vec<u32>,
    finish: Vec<Option<(u64, Outcome)>>,
    round_at: Option<u64>,
    rng: ChaCha8Rng,
    rounds: u64,
    skipped_rounds: u64,
    policy_errors: u64,
    in_rounds: Duration,
}

impl Replay<'_> {
    fn schedule_round(&mut self, at: u64) {
        if self.round_at.is_none_or(|r| at < r) {
            self.round_at = Some(at);
            self.heap.push(Reverse((at, Event::Round)));
        }
    }

    fn grid(&self, t: u64) -> u64 {
        match self.cfg.round_interval_s {
            0 => t,
            i => t.div_ceil(i) * i,
        }
    }

    fn handle(&mut self, t: u64, event: Event) -> Result<(), SimError> {
        match event {
            Event::Arrival(i) => {
                let job = &self.trace.jobs[i as usize];
                let vc = self.sched.virtual_cluster(&job.vc);
                let spec = JobSpec {
                    id: JobId(u64::from(i)),
                    vc,
                    user: 0,
                    gpus: job.gpus,
                    submitted_s: t,
                };
                self.sched
                    .submit(spec)
                    .map_err(|source| SimError::Rejected {
                        job: job.name.clone(),
                        source,
                    })?;
                let at = self.grid(t);
                self.schedule_round(at);
            }
            Event::AttemptEnd { job, generation } => {
                let i = job as usize;
                if generation != self.generation[i] {
                    return Ok(()); // the attempt was interrupted by a server failure
                }
                let attempts = &self.trace.jobs[i].attempts;
                let k = self.next_attempt[i];
                let last = k + 1 >= attempts.len();
                let end = if !last {
                    AttemptEnd::Failed { retry: true }
                } else {
                    match attempts[k].1 {
                        Outcome::Passed => AttemptEnd::Passed,
                        Outcome::Failed => AttemptEnd::Failed { retry: false },
                        Outcome::Killed => AttemptEnd::Killed,
                    }
                };
                self.sched.end_attempt(JobId(u64::from(job)), t, end)?;
                self.next_attempt[i] += 1;
                if last {
                    self.finish[i] = Some((t, attempts[k].1));
                }
                let at = self.grid(t);
                self.schedule_round(at);
            }
            Event::ServerDown(s) => {
                let hit = self.sched.server_down(ServerId(s), t)?;
                for id in hit {
                    self.generation[id.0 as usize] += 1;
                }
                self.heap
                    .push(Reverse((t + self.cfg.server_repair_s, Event::ServerUp(s))));
                let at = self.grid(t);
                self.schedule_round(at);
            }
            Event::ServerUp(s) => {
                self.sched.server_up(ServerId(s))?;
                if let Some(mtbf) = self.cfg.server_mtbf_s {
                    let next = exp_sample(&mut self.rng, mtbf);
                    self.heap.push(Reverse((t + next, Event::ServerDown(s))));
                }
                let at = self.grid(t);
                self.schedule_round(at);
            }
            Event::Round => {
                if self.round_at != Some(t) {
                    return Ok(()); // superseded by an earlier round
                }
                self.round_at = None;
                // While fewer GPUs are free than the smallest waiting gang, no
                // job can start: skip the round (waits keep their last reason).
                let free = self.sched.state().free_gpus();
                if self.sched.smallest_pending_gpus().is_some_and(|g| g > free) {
                    self.skipped_rounds += 1;
                    if self.cfg.idle_tick_s > 0 {
                        self.schedule_round(t + self.cfg.idle_tick_s);
                    }
                    return Ok(());
                }
                let started = Instant::now();
                let report = self.sched.round(t)?;
                self.in_rounds += started.elapsed();
                self.rounds += 1;
                self.policy_errors += report.policy_errors.len() as u64;
                for s in &report.starts {
                    let i = s.job.0 as usize;
                    let run = self.trace.jobs[i].attempts[self.next_attempt[i]].0;
                    let generation = self.generation[i];
                    self.heap.push(Reverse((
                        t + run,
                        Event::AttemptEnd {
                            job: s.job.0 as u32,
                            generation,
                        },
                    )));
                }
                if self.sched.pending_len() > 0 && self.cfg.idle_tick_s > 0 {
                    self.schedule_round(t + self.cfg.idle_tick_s);
                }
            }
        }
        Ok(())
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

/// Replays `trace` on `topology` with `policies`. `on_arrival` is called once
/// per job as it arrives (for progress bars).
pub fn run(
    topology: Topology,
    trace: &Trace,
    policies: PolicySet,
    cfg: &SimConfig,
    mut on_arrival: impl FnMut(),
) -> Result<RunResult, SimError> {
    let clock = Instant::now();
    let n = trace.jobs.len();
    let servers = topology.servers().len();
    let mut sim = Replay {
        sched: Scheduler::with_policies(topology, policies),
        trace,
        cfg,
        heap: BinaryHeap::new(),
        next_attempt: vec![0; n],
        generation: vec![0; n],
        finish: vec![None; n],
        round_at: None,
        rng: ChaCha8Rng::seed_from_u64(cfg.seed),
        rounds: 0,
        skipped_rounds: 0,
        policy_errors: 0,
        in_rounds: Duration::ZERO,
    };
    sim.sched.set_placement_strategy(cfg.placement);
    // VCs in order of first appearance, with their quotas.
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
    let vcs = sim.sched.virtual_clusters().len();
    let arrival_end = trace.jobs.last().map_or(0, |j| j.submit_s);
    let sample_step = (arrival_end / 2000).max(60);
    let mut samples = Vec::new();
    let mut next_sample = 0u64;
    let mut alloc_integral = 0.0f64;
    let mut vc_integral = vec![0.0f64; vcs];
    let mut last_t = 0u64;
    let mut next_arrival = 0usize;
    let mut rounds_at_idle = 0u64;
    loop {
        let heap_t = sim.heap.peek().map(|Reverse((t, _))| *t);
        let arrival_t = trace.jobs.get(next_arrival).map(|j| j.submit_s);
        let t = match (heap_t, arrival_t) {
            (None, None) => break,
            (Some(h), None) => h,
            (None, Some(a)) => a,
            (Some(h), Some(a)) => h.min(a),
        };
        // Account the state held over [last_t, t).
        let window_end = t.min(arrival_end);
        if window_end > last_t {
            let dt = (window_end - last_t) as f64;
            let state = sim.sched.state();
            let online = state.online_gpus().max(1) as f64;
            alloc_integral += state.allocated_gpus() as f64 / online * dt;
            for (v, acc) in sim.sched.virtual_clusters().iter().zip(&mut vc_integral) {
                *acc += f64::from(v.held_gpus) * dt;
            }
        }
        while next_sample <= t && next_sample <= arrival_end {
            samples.push(Sample {
                t_s: next_sample,
                allocated: sim.sched.state().allocated_gpus(),
                per_vc: sim
                    .sched
                    .virtual_clusters()
                    .iter()
                    .map(|v| v.held_gpus)
                    .collect(),
            });
            next_sample += sample_step;
        }
        last_t = last_t.max(t);
        // All events at time t: heap events (ends, failures) first, then
        // arrivals, then the round (the heap orders Round last).
        while let Some(Reverse((ht, ev))) = sim.heap.peek().copied() {
            if ht != t || ev == Event::Round {
                break;
            }
            sim.heap.pop();
            sim.handle(t, ev)?;
        }
        while trace
            .jobs
            .get(next_arrival)
            .is_some_and(|j| j.submit_s == t)
        {
            sim.handle(t, Event::Arrival(next_arrival as u32))?;
            on_arrival();
            next_arrival += 1;
        }
        while let Some(Reverse((ht, ev))) = sim.heap.peek().copied() {
            if ht != t {
                break;
            }
            sim.heap.pop();
            sim.handle(t, ev)?;
        }
        if sim.heap.is_empty() && next_arrival >= n {
            break;
        }
        // Stop when all arrivals are in and nothing runs: either nothing
        // waits, or what waits has made no progress for a long stretch of
        // rounds (it will be reported as never started).
        if next_arrival >= n && sim.sched.state().allocations().is_empty() {
            if sim.sched.pending_len() == 0 {
                break;
            }
            if sim.rounds + sim.skipped_rounds > rounds_at_idle + STALLED_ROUNDS {
                break;
            }
        } else {
            rounds_at_idle = sim.rounds + sim.skipped_rounds;
        }
    }
    let span = arrival_end.max(1) as f64;
    let jobs = trace
        .jobs
        .iter()
        .enumerate()
        .map(|(i, tj)| {
            let rec = sim.sched.job(JobId(i as u64));
            JobOutcome {
                gpus: tj.gpus,
                vc: rec.map_or(0, |r| r.spec.vc.0 as usize),
                submit_s: tj.submit_s,
                first_start_s: rec.and_then(|r| r.first_start_s),
                finish_s: sim.finish[i].map(|f| f.0),
                status: sim.finish[i].map(|f| f.1),
                fair_share_s: rec.map_or(0, |r| r.wait.get(gangway_core::WaitReason::FairShare)),
                fragmentation_s: rec
                    .map_or(0, |r| r.wait.get(gangway_core::WaitReason::Fragmentation)),
                first_servers: rec.and_then(|r| r.first_placement.map(|p| p.0)),
                failed_gpu_s: rec.map_or(0, |r| r.failed_gpu_s),
            }
        })
        .collect();
    // A broken invariant would be a bug in the core: fail loudly.
    sim.sched.check_invariants()?;
    let vc_list = sim.sched.virtual_clusters();
    Ok(RunResult {
        jobs,
        vcs: vc_list.iter().map(|v| v.name.clone()).collect(),
        quotas: vc_list.iter().map(|v| v.quota_gpus).collect(),
        vc_mean_held: vc_integral.iter().map(|x| x / span).collect(),
        gpu_allocation_mean: alloc_integral / span,
        samples,
        policy_errors: sim.policy_errors,
        rounds: sim.rounds,
        skipped_rounds: sim.skipped_rounds,
        elapsed: clock.elapsed(),
        in_rounds: sim.in_rounds,
    })
}
