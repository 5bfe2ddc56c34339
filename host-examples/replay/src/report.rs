//! `report.json`: the replay's results, in a stable schema.
//!
//! ```text
//! {
//!   "reproduce": {"gangway_version", "commit", "args": [...], "seed",
//!                 "time_scale", "quotas", "inputs": [{"role", "path", "sha256"}]},
//!   "workload": {"source", "jobs", "warm", "skipped": [{"at", "reason"}]},
//!   "topology": {"source", "servers", "gpus", "racks", "grouping", "shape"},
//!   "runs": [{
//!     "name", "policies": {"fairness", "locality", "gang", "reclaim", "retry",
//!                          "defragment", "placement"},
//!     "jobs": {"submitted", "passed", "failed", "killed", "never_started", "unfinished"},
//!     "by_size": {"1": B, "2-4": B, "5-8": B, ">8": B},
//!     "gpu_allocation_mean", "jct_s": {"p50", "p90", "mean"},
//!     "jct_passed_s": {"p50", "p90", "mean"}, "failed_attempt_gpu_s",
//!     "spread_slowdown_gpu_s", "gpu_s_by_status": {"passed", "killed", "failed"},
//!     "reclaim": {"preemptions", "jobs_preempted", "restart_gpu_s"},
//!     "defragment": {"migrations", "restart_gpu_s"},
//!     "retry": {"attempts_avoided", "saved_gpu_s", "passing_jobs_lost", "probes"},
//!     "per_vc": {VC: {"quota_gpus", "mean_gpus_held", "jobs"}},
//!     "policy_errors",
//!     "quarantines": [{"at_s", "slot", "module", "restored", "error"}],
//!     "policy_logs_dropped": {"messages", "bytes", "kept"} (only when some were),
//!     "gpus_over_time": {"t_s": [...], "allocated": [...], "online": [...]},
//!     "fit": {"targets", "score", "met", "items",
//!             "detail": [{"name", "observed", "model", "error", "met"}]},
//!     "gpu_types": {"makespan_s", "total_wait_s", "types": [{"name", "gpus", "jobs", "jct_s",
//!                   "total_wait_s", "used_gpu_s", "utilisation"}]}
//!   }]
//! }
//! B = {"jobs", "queue_delay_s": {"p50", "p90", "p99", "mean"},
//!      "total_wait_s": {"p50", "p90", "p99", "mean"},
//!      "fair_share_delay_s", "fragmentation_delay_s",
//!      "jobs_with_fair_share_delay", "jobs_with_fragmentation_delay",
//!      "fair_share_events", "fragmentation_events",
//!      "fragmentation_share_of_events", "fragmentation_share_of_time",
//!      "wait_s": {REASON: seconds, ...},
//!      "queued_behind_s": {REASON | "starts" | "unattributed": seconds, ...},
//!      "servers_spanned": {"1": n, "2": n, ...}}
//! ```
//!
//! Definitions. Size buckets are the study's (1, 2-4, 5-8, >8 GPUs). Queueing
//! delay is the notebook's: first attempt start minus submit, over jobs that
//! started; it flatters preemptive policies, whose jobs wait again after
//! being stopped, so `total_wait_s` gives each job's waiting over all its
//! attempts: the time from submit to its end that it did not run (until the
//! replay's end for a job that never finished). `fragmentation_share_of_events` is Table 2's share (by delay
//! events) and `fragmentation_share_of_time` the same share of delay
//! seconds, both as fractions. `queued_behind_s` splits the `queued` wait
//! (a job behind earlier jobs of its own VC, often beyond the jobs a round
//! shows) by what its VC's queue waited for, round by round: the reason of
//! the VC's earliest job shown that round, or `starts` when the jobs ahead
//! of it started; the split of each job adds up to its `queued` seconds. `fair_share_delay_s` and `fragmentation_delay_s` are the bucket's
//! *total* seconds of each kind of wait over all of a job's waits (retries
//! included), as attributed by the scheduler's wait reasons; a job "has" a
//! delay kind if it spent at least one second in it. A delay *event* is a
//! stretch of rounds a job spent waiting for one of the two reasons (entered
//! anew each time its reason changes to it); Table 2 counts events, so the
//! shares printed are events (with the time share beside them, and "n/a (0
//! events)" for a bucket with none). `spread_slowdown_gpu_s` is the GPU
//! time lost to spreading (see `sim::locality_slowdown`);
//! `gpu_s_by_status` sums each finished job's attempts' GPU time by its
//! final status. `servers_spanned` counts
//! first attempts by servers used. `gpu_allocation_mean` is the time-weighted
//! mean of allocated / online GPUs from the first to the last arrival. JCT is
//! finish minus submit over jobs that finished (any status).
//! `failed_attempt_gpu_s` is GPU-seconds of attempts that failed or were
//! interrupted. `wait_s` splits a bucket's total wait by every wait reason of
//! the core (fair-share, fragmentation, reserved, held-by-policy,
//! no-capacity, queued, retry-delay). `jct_passed_s` is over passed jobs
//! only. `reclaim` and `defragment` count preemptions and migrations and the
//! GPU-seconds their restarts cost; `retry` counts recorded attempts a retry
//! policy chose not to run, their GPU-seconds (saved), the jobs among them
//! that the trace shows passing on a later attempt (lost), and probes run. `never_started` jobs are counted, not hidden. Times are
//! seconds. Wall-clock and CPU timings never appear here (they go to
//! stdout), so the same inputs give a byte-identical file.

mod gpu_types;

use std::collections::BTreeMap;

use serde::Serialize;

pub use gpu_types::{GpuTypeStats, TypeStats};

use gangway_core::{Slot, WaitReason};

use crate::sim::{JobOutcome, QueuedBehind, RunResult};
use crate::trace::{Outcome, SkippedJob};

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What reproduces it: version, commit, arguments, seed, time scale,
    /// input files' hashes.
    pub reproduce: crate::reproduce::Reproduce,
    /// What was replayed.
    pub workload: Workload,
    /// On what.
    pub topology: TopologyInfo,
    /// One entry per policy set.
    pub runs: Vec<Run>,
}

/// The workload's origin.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    /// File and format, or the generator and its seed.
    pub source: String,
    /// Jobs replayed.
    pub jobs: usize,
    /// Of those, jobs submitted before a `--skip` window and still running
    /// at its start, loaded as running (left out of every statistic).
    pub warm: usize,
    /// Jobs of the input that could not be replayed, with why.
    pub skipped: Vec<SkippedJob>,
}

/// The topology used.
#[derive(Clone, Debug, Serialize)]
pub struct TopologyInfo {
    /// Where it came from.
    pub source: String,
    /// Servers.
    pub servers: usize,
    /// GPUs.
    pub gpus: u32,
    /// Racks (domains one level below the cluster).
    pub racks: usize,
    /// How a machine list's machines were grouped into racks
    /// (`same-sku, 32 per rack`); `null` where the input named its racks.
    pub grouping: Option<String>,
    /// In words: `552 servers in 21 racks, 3205 GPUs (same-sku, 32 per rack)`.
    pub shape: String,
}

/// Policies of a run: each slot's policy, then the placement tie-break.
/// In `report.json` an object with a key per slot (`fairness`, `locality`,
/// `gang`, `reclaim`, `retry`, `defragment`) and `placement`.
#[derive(Clone, Debug)]
pub struct Policies {
    /// Each slot's policy (a built-in name or a module path).
    slots: BTreeMap<Slot, String>,
    /// Placement tie-break (`best-fit`, `spread` or `heartbeat`).
    pub placement: String,
}

impl Policies {
    /// The policies of `choice`.
    pub fn of(choice: &gangway_catalog::PolicyChoice) -> Policies {
        Policies {
            slots: Slot::ALL
                .into_iter()
                .map(|slot| (slot, choice.slot(slot).policy))
                .collect(),
            placement: choice.placement.as_str().to_string(),
        }
    }

    /// The policy of `slot`.
    pub fn slot(&self, slot: Slot) -> &str {
        self.slots.get(&slot).map_or("", String::as_str)
    }
}

impl Serialize for Policies {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.slots.len() + 1))?;
        // In the slots' declaration order (a BTreeMap by slot), then placement.
        for (slot, policy) in &self.slots {
            map.serialize_entry(slot.as_str(), policy)?;
        }
        map.serialize_entry("placement", &self.placement)?;
        map.end()
    }
}

/// What the reclaim slot did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReclaimStats {
    /// Attempts stopped.
    pub preemptions: u64,
    /// Jobs stopped at least once.
    pub jobs_preempted: usize,
    /// GPU-seconds their restarts cost.
    pub restart_gpu_s: u64,
}

/// What the defragment slot did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DefragmentStats {
    /// Jobs moved.
    pub migrations: u64,
    /// GPU-seconds their restarts cost.
    pub restart_gpu_s: u64,
}

/// What the retry slot did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RetryStats {
    /// Recorded attempts not run because the policy gave up.
    pub attempts_avoided: u64,
    /// Their GPU-seconds.
    pub saved_gpu_s: u64,
    /// Jobs given up on that the trace shows passing on a later attempt.
    pub passing_jobs_lost: usize,
    /// Probes run.
    pub probes: u64,
}

/// Job counts by outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobCounts {
    /// Jobs replayed.
    pub submitted: usize,
    /// Ended passed.
    pub passed: usize,
    /// Ended failed.
    pub failed: usize,
    /// Ended killed.
    pub killed: usize,
    /// Never started.
    pub never_started: usize,
    /// Started but had not finished when the replay stopped.
    pub unfinished: usize,
}

/// Percentiles of a delay.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Delay {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

/// JCT percentiles and mean.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Jct {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Mean.
    pub mean: f64,
}

fn jct(mut v: Vec<f64>) -> Jct {
    v.sort_by(f64::total_cmp);
    Jct {
        p50: percentile(&v, 50.0),
        p90: percentile(&v, 90.0),
        mean: if v.is_empty() {
            0.0
        } else {
            round3(v.iter().sum::<f64>() / v.len() as f64)
        },
    }
}

/// Per size bucket.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Bucket {
    /// Jobs in the bucket.
    pub jobs: usize,
    /// Queueing delay of jobs that started.
    pub queue_delay_s: Delay,
    /// Total fair-share delay.
    pub fair_share_delay_s: u64,
    /// Total fragmentation delay.
    pub fragmentation_delay_s: u64,
    /// Jobs with any fair-share delay.
    pub jobs_with_fair_share_delay: usize,
    /// Jobs with any fragmentation delay.
    pub jobs_with_fragmentation_delay: usize,
    /// Fair-share delay events: stretches of waiting because the job's VC
    /// had used its quota (a job may have several).
    pub fair_share_events: u64,
    /// Fragmentation delay events: stretches of waiting with quota free but
    /// no placement local enough.
    pub fragmentation_events: u64,
    /// Each job's total waiting: the time from its submission to its end
    /// (or the replay's) that it did not run, over all its attempts (waits
    /// after a preemption, interruption or failure, and retry gaps, included).
    pub total_wait_s: Delay,
    /// Fragmentation's share of the bucket's delay events (Table 2's
    /// count; `null` without any event).
    pub fragmentation_share_of_events: Option<f64>,
    /// Fragmentation's share of the bucket's fair-share plus fragmentation
    /// delay time (`null` without any).
    pub fragmentation_share_of_time: Option<f64>,
    /// Total wait by reason.
    pub wait_s: BTreeMap<String, u64>,
    /// The `queued` wait split by what the job's VC queue waited for:
    /// the wait reason of the earliest job its VC showed the fairness
    /// policy that round, `starts` when the jobs ahead of it started,
    /// `unattributed` for queued time no round saw.
    pub queued_behind_s: BTreeMap<String, u64>,
    /// First attempts by servers spanned.
    pub servers_spanned: BTreeMap<u32, usize>,
}

impl Bucket {
    /// Fragmentation's share of the bucket's delay events, counted as the
    /// study's Table 2 counts them (events, not jobs); `None` when there was
    /// no delay event of either kind (a share of nothing).
    pub fn fragmentation_share(&self) -> Option<f64> {
        let total = self.fair_share_events + self.fragmentation_events;
        (total > 0).then(|| self.fragmentation_events as f64 / total as f64)
    }

    /// Fragmentation's share of the bucket's fair-share plus fragmentation
    /// delay time; `None` when there was none.
    pub fn fragmentation_time_share(&self) -> Option<f64> {
        let total = self.fair_share_delay_s + self.fragmentation_delay_s;
        (total > 0).then(|| self.fragmentation_delay_s as f64 / total as f64)
    }

    /// The Table 2 line of the bucket: fragmentation's event share and time
    /// share and the events behind them, or `n/a (0 events)`.
    ///
    /// ```
    /// use gangway_replay::report::Bucket;
    /// assert_eq!(Bucket::default().table2(), "n/a (0 events)");
    /// let b = Bucket { fair_share_events: 1, fragmentation_events: 3,
    ///                  fair_share_delay_s: 60, fragmentation_delay_s: 60, ..Bucket::default() };
    /// assert_eq!(b.table2(), "75.0 % / 50.0 % of 4 events");
    /// ```
    pub fn table2(&self) -> String {
        match (self.fragmentation_share(), self.fragmentation_time_share()) {
            (Some(e), Some(t)) => format!(
                "{:.1} % / {:.1} % of {} events",
                e * 100.0,
                t * 100.0,
                self.fair_share_events + self.fragmentation_events
            ),
            (Some(e), None) => format!(
                "{:.1} % / n/a of {} events",
                e * 100.0,
                self.fair_share_events + self.fragmentation_events
            ),
            _ => "n/a (0 events)".to_string(),
        }
    }
}

/// Per virtual cluster.
#[derive(Clone, Debug, Serialize)]
pub struct VcStats {
    /// Quota used in the run (`null`: unlimited).
    pub quota_gpus: Option<u32>,
    /// Time-weighted mean GPUs held.
    pub mean_gpus_held: f64,
    /// Jobs submitted.
    pub jobs: usize,
}

/// One policy set's results.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// The preset or policy-set name.
    pub name: String,
    /// The policies.
    pub policies: Policies,
    /// Job counts.
    pub jobs: JobCounts,
    /// Per size bucket.
    pub by_size: BTreeMap<String, Bucket>,
    /// Mean allocated fraction of online GPUs.
    pub gpu_allocation_mean: f64,
    /// Job completion time (all finished jobs).
    pub jct_s: Jct,
    /// Job completion time of passed jobs.
    pub jct_passed_s: Jct,
    /// GPU-seconds lost to failed or interrupted attempts.
    pub failed_attempt_gpu_s: u64,
    /// GPU-seconds lost to spreading: how much longer attempts ran because
    /// they spanned more servers than needed (0 with the locality cost off).
    pub spread_slowdown_gpu_s: u64,
    /// GPU-seconds used by jobs by final status (`passed`, `killed`,
    /// `failed`): every attempt's run time times its GPUs (Table 6).
    pub gpu_s_by_status: BTreeMap<String, u64>,
    /// What the reclaim slot did.
    pub reclaim: ReclaimStats,
    /// What the defragment slot did.
    pub defragment: DefragmentStats,
    /// What the retry slot did.
    pub retry: RetryStats,
    /// Per virtual cluster.
    pub per_vc: BTreeMap<String, VcStats>,
    /// Policy calls that failed and fell back.
    pub policy_errors: u64,
    /// Policies quarantined after repeated failures, in order.
    pub quarantines: Vec<QuarantineRecord>,
    /// The policy modules' `log` messages dropped past the log limits
    /// (absent when none were).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_logs_dropped: Option<LogsDropped>,
    /// GPUs allocated and online over the arrival window, sampled.
    pub gpus_over_time: GpusOverTime,
    /// Its fit to observed targets (`--fit`; absent without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<crate::calibrate::fit_record::Fit>,
    /// On a cluster of several GPU types: the makespan and each type's
    /// jobs, completion times, waits, GPU time and utilisation (absent on
    /// a cluster of one type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_types: Option<GpuTypeStats>,
}

/// The policy modules' `log` messages a run dropped past the limits
/// (`gangway_core::wasm::SandboxConfig::log_messages_per_call` and the
/// others), and those it kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogsDropped {
    /// Messages dropped.
    pub messages: u64,
    /// Their bytes, as sent.
    pub bytes: u64,
    /// Messages kept (passed to the log).
    pub kept: u64,
}

/// The cluster's allocated and online GPUs over time: at most
/// [`GpusOverTime::MAX_POINTS`] evenly spaced samples of the replay's
/// (the GPUs-allocated plot's data).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GpusOverTime {
    /// Simulated seconds of each sample.
    pub t_s: Vec<u64>,
    /// GPUs allocated then.
    pub allocated: Vec<u32>,
    /// GPUs on servers that were up then.
    pub online: Vec<u32>,
}

impl GpusOverTime {
    /// The most samples kept.
    pub const MAX_POINTS: usize = 500;

    /// Every `ceil(n / MAX_POINTS)`-th sample of `samples`.
    ///
    /// ```
    /// use gangway_replay::report::GpusOverTime;
    /// use gangway_replay::sim::Sample;
    /// let s: Vec<Sample> = (0..1200)
    ///     .map(|i| Sample { t_s: i * 60, allocated: 5, online: 8, per_vc: vec![] })
    ///     .collect();
    /// let g = GpusOverTime::of(&s);
    /// assert_eq!(g.t_s.len(), 400);
    /// assert_eq!((g.t_s[1], g.allocated[1], g.online[1]), (180, 5, 8));
    /// ```
    pub fn of(samples: &[crate::sim::Sample]) -> GpusOverTime {
        let every = samples.len().div_ceil(Self::MAX_POINTS).max(1);
        let kept = samples.iter().step_by(every);
        GpusOverTime {
            t_s: kept.clone().map(|s| s.t_s).collect(),
            allocated: kept.clone().map(|s| s.allocated).collect(),
            online: kept.map(|s| s.online).collect(),
        }
    }
}

/// A policy the scheduler quarantined during a run.
#[derive(Clone, Debug, Serialize)]
pub struct QuarantineRecord {
    /// Simulated time of the round, in seconds.
    pub at_s: u64,
    /// The slot.
    pub slot: String,
    /// The policy removed, by identity: its name and, for a Wasm module,
    /// the first 12 hex digits of its SHA-256 (`las.wasm@3f2a9c01b7e4`).
    pub module: String,
    /// The policy deciding in its place from then on, by identity.
    pub restored: String,
    /// Its last error.
    pub error: String,
}

/// The study's size bucket of a gang.
pub fn bucket_name(gpus: u32) -> &'static str {
    match gpus {
        0 | 1 => "1",
        2..=4 => "2-4",
        5..=8 => "5-8",
        _ => ">8",
    }
}

/// The bucket names in order.
pub const BUCKETS: [&str; 4] = ["1", "2-4", "5-8", ">8"];

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn delay(mut v: Vec<f64>) -> Delay {
    v.sort_by(f64::total_cmp);
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    Delay {
        p50: percentile(&v, 50.0),
        p90: percentile(&v, 90.0),
        p99: percentile(&v, 99.0),
        mean: round3(mean),
    }
}

/// Summarizes one replay.
pub fn summarize(name: &str, policies: Policies, r: &RunResult) -> Run {
    let own = &r.jobs[r.warm.min(r.jobs.len())..];
    let mut tally = Tally::new(own.len(), r.vcs.len());
    for j in own {
        tally.add(j);
    }
    let by_size = tally.buckets();
    Run {
        name: name.to_string(),
        policies,
        jobs: tally.counts,
        by_size,
        gpu_allocation_mean: round3(r.gpu_allocation_mean),
        jct_s: jct(tally.jcts),
        jct_passed_s: jct(tally.jcts_passed),
        failed_attempt_gpu_s: tally.failed_gpu_s,
        spread_slowdown_gpu_s: tally.slowdown_gpu_s,
        gpu_s_by_status: tally.by_status,
        reclaim: tally.reclaim,
        defragment: tally.defragment,
        retry: tally.retry,
        per_vc: per_vc(r, &tally.vc_jobs),
        policy_errors: r.policy_errors,
        quarantines: r.quarantines.iter().map(QuarantineRecord::of).collect(),
        policy_logs_dropped: None,
        gpus_over_time: GpusOverTime::of(&r.samples),
        fit: None,
        gpu_types: gpu_types::of(r),
    }
}

/// What [`summarize`] gathers over a run's own jobs, one job at a time.
struct Tally {
    counts: JobCounts,
    by_size: BTreeMap<String, Bucket>,
    /// Queue delays (submit to first start) by bucket name.
    delays: BTreeMap<&'static str, Vec<f64>>,
    /// Total waits by bucket name.
    total_waits: BTreeMap<&'static str, Vec<f64>>,
    jcts: Vec<f64>,
    jcts_passed: Vec<f64>,
    reclaim: ReclaimStats,
    defragment: DefragmentStats,
    retry: RetryStats,
    /// Jobs per VC.
    vc_jobs: Vec<usize>,
    failed_gpu_s: u64,
    slowdown_gpu_s: u64,
    by_status: BTreeMap<String, u64>,
}

impl Tally {
    /// An empty tally of `submitted` jobs over `vcs` VCs.
    fn new(submitted: usize, vcs: usize) -> Self {
        Tally {
            counts: JobCounts {
                submitted,
                ..JobCounts::default()
            },
            by_size: BUCKETS
                .iter()
                .map(|b| (b.to_string(), Bucket::default()))
                .collect(),
            delays: BTreeMap::new(),
            total_waits: BTreeMap::new(),
            jcts: Vec::new(),
            jcts_passed: Vec::new(),
            reclaim: ReclaimStats::default(),
            defragment: DefragmentStats::default(),
            retry: RetryStats::default(),
            vc_jobs: vec![0; vcs],
            failed_gpu_s: 0,
            slowdown_gpu_s: 0,
            by_status: BTreeMap::new(),
        }
    }

    /// Adds job `j`.
    fn add(&mut self, j: &JobOutcome) {
        self.slowdown_gpu_s += j.spread_slowdown_gpu_s;
        if let Some(st) = j.status {
            *self.by_status.entry(st.as_str().to_string()).or_default() += j.used_gpu_s;
        }
        self.count(j);
        if let Some(n) = self.vc_jobs.get_mut(j.vc) {
            *n += 1;
        }
        self.failed_gpu_s += j.failed_gpu_s;
        if let Some(f) = j.finish_s {
            self.jcts.push(f.saturating_sub(j.submit_s) as f64);
            if j.status == Some(Outcome::Passed) {
                self.jcts_passed.push(f.saturating_sub(j.submit_s) as f64);
            }
        }
        self.add_restarts(j);
        self.retry.attempts_avoided += u64::from(j.attempts_avoided);
        self.retry.saved_gpu_s += j.saved_gpu_s;
        self.retry.passing_jobs_lost += usize::from(j.passing_lost);
        self.retry.probes += u64::from(j.probes);
        self.add_to_bucket(j);
    }

    /// Counts job `j` by how it ended.
    fn count(&mut self, j: &JobOutcome) {
        let counts = &mut self.counts;
        match (j.first_start_s, j.status) {
            (None, _) => counts.never_started += 1,
            (Some(_), None) => counts.unfinished += 1,
            (Some(_), Some(Outcome::Passed)) => counts.passed += 1,
            (Some(_), Some(Outcome::Failed)) => counts.failed += 1,
            (Some(_), Some(Outcome::Killed)) => counts.killed += 1,
        }
    }

    /// Adds job `j`'s preemptions and migrations, sharing its restart time
    /// between them (a restart follows a preemption, resumed, or a
    /// migration).
    fn add_restarts(&mut self, j: &JobOutcome) {
        self.reclaim.preemptions += u64::from(j.preemptions);
        self.reclaim.jobs_preempted += usize::from(j.preemptions > 0);
        self.defragment.migrations += u64::from(j.migrations);
        let restarts = u64::from(j.preemptions) + u64::from(j.migrations);
        if let Some(per) = j.restart_gpu_s.checked_div(restarts) {
            self.reclaim.restart_gpu_s += per * u64::from(j.preemptions);
            self.defragment.restart_gpu_s += j.restart_gpu_s - per * u64::from(j.preemptions);
        }
    }

    /// Adds job `j`'s waits to its size bucket.
    fn add_to_bucket(&mut self, j: &JobOutcome) {
        let name = bucket_name(j.gpus);
        let Some(b) = self.by_size.get_mut(name) else {
            return;
        };
        b.jobs += 1;
        let fair_share = j.waited(WaitReason::FairShare);
        let fragmentation = j.waited(WaitReason::Fragmentation);
        b.fair_share_delay_s += fair_share;
        b.fragmentation_delay_s += fragmentation;
        b.jobs_with_fair_share_delay += usize::from(fair_share > 0);
        b.jobs_with_fragmentation_delay += usize::from(fragmentation > 0);
        b.fair_share_events += u64::from(j.delay_events.fair_share);
        b.fragmentation_events += u64::from(j.delay_events.fragmentation);
        for r in WaitReason::ALL {
            *b.wait_s.entry(r.as_str().to_string()).or_default() += j.waited(r);
        }
        for behind in QueuedBehind::ALL {
            *b.queued_behind_s
                .entry(behind.as_str().to_string())
                .or_default() += j.queued_behind_s[behind.index()];
        }
        if let Some(s) = j.first_servers {
            *b.servers_spanned.entry(s).or_default() += 1;
        }
        self.total_waits
            .entry(name)
            .or_default()
            .push(j.waited_s as f64);
        if let Some(start) = j.first_start_s {
            self.delays
                .entry(name)
                .or_default()
                .push(start.saturating_sub(j.submit_s) as f64);
        }
    }

    /// The size buckets, their delays and shares worked out.
    fn buckets(&mut self) -> BTreeMap<String, Bucket> {
        let mut by_size = std::mem::take(&mut self.by_size);
        for (name, b) in &mut by_size {
            b.queue_delay_s = delay(self.delays.remove(name.as_str()).unwrap_or_default());
            b.total_wait_s = delay(self.total_waits.remove(name.as_str()).unwrap_or_default());
            b.fragmentation_share_of_events = b.fragmentation_share().map(round4);
            b.fragmentation_share_of_time = b.fragmentation_time_share().map(round4);
        }
        by_size
    }
}

/// Each VC of `r`: its quota, mean GPUs held and `vc_jobs` jobs.
fn per_vc(r: &RunResult, vc_jobs: &[usize]) -> BTreeMap<String, VcStats> {
    r.vcs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                v.clone(),
                VcStats {
                    quota_gpus: r.quotas.get(i).copied().flatten(),
                    mean_gpus_held: round3(r.vc_mean_held.get(i).copied().unwrap_or(0.0)),
                    jobs: vc_jobs[i],
                },
            )
        })
        .collect()
}

impl QuarantineRecord {
    /// The record of quarantine `q`.
    fn of(q: &crate::sim::Quarantine) -> Self {
        QuarantineRecord {
            at_s: q.at_s,
            slot: q.slot.as_str().to_string(),
            module: q.module.clone(),
            restored: q.restored.clone(),
            error: q.error.clone(),
        }
    }
}

fn minutes(s: f64) -> String {
    format!("{:.1}", s / 60.0)
}

/// The console summary: one column per run.
pub fn table(runs: &[Run]) -> String {
    let mut rows = Rows {
        runs,
        rows: Vec::new(),
    };
    rows.policies();
    rows.jobs();
    rows.gpu_time();
    rows.slot_costs();
    if runs.iter().any(|r| r.gpu_types.is_some()) {
        rows.gpu_types();
    }
    for b in BUCKETS {
        rows.bucket(b);
    }
    rows.row("policy errors", &|r| r.policy_errors.to_string());
    let mut out = rows.render();
    for r in runs {
        for q in &r.quarantines {
            out.push_str(&format!(
                "{}: {} policy {} quarantined at {} s after repeated failures ({}); {} decides since\n",
                r.name, q.slot, q.module, q.at_s, q.error, q.restored
            ));
        }
        if let Some(d) = &r.policy_logs_dropped {
            out.push_str(&format!(
                "{}: {} log messages of policy modules ({} bytes) dropped past the log limits, {} kept\n",
                r.name, d.messages, d.bytes, d.kept
            ));
        }
    }
    out
}

/// The rows of [`table`]: a label and one cell per run.
struct Rows<'r> {
    runs: &'r [Run],
    rows: Vec<(String, Vec<String>)>,
}

impl Rows<'_> {
    /// Adds the row `label`, each run's cell written by `f`.
    fn row(&mut self, label: &str, f: &dyn Fn(&Run) -> String) {
        self.rows
            .push((label.to_string(), self.runs.iter().map(f).collect()));
    }

    /// The policy set's name and its policies.
    fn policies(&mut self) {
        self.row("policy set", &|r| r.name.clone());
        self.row("fairness / locality / gang / placement", &|r| {
            format!(
                "{}/{}/{}/{}",
                r.policies.slot(Slot::Fairness),
                r.policies.slot(Slot::Locality),
                r.policies.slot(Slot::Gang),
                r.policies.placement
            )
        });
        self.row("reclaim / retry / defragment", &|r| {
            format!(
                "{}/{}/{}",
                r.policies.slot(Slot::Reclaim),
                r.policies.slot(Slot::Retry),
                r.policies.slot(Slot::Defragment)
            )
        });
    }

    /// How the jobs ended, the cluster's allocation and JCTs.
    fn jobs(&mut self) {
        self.row("jobs passed/failed/killed", &|r| {
            format!("{}/{}/{}", r.jobs.passed, r.jobs.failed, r.jobs.killed)
        });
        self.row("never started / unfinished", &|r| {
            format!("{} / {}", r.jobs.never_started, r.jobs.unfinished)
        });
        self.row("GPU allocation (mean)", &|r| {
            format!("{:.1} %", r.gpu_allocation_mean * 100.0)
        });
        self.row("JCT mean / p50 / p90 (h)", &|r| {
            format!(
                "{:.2} / {:.2} / {:.2}",
                r.jct_s.mean / 3600.0,
                r.jct_s.p50 / 3600.0,
                r.jct_s.p90 / 3600.0
            )
        });
        self.row("JCT of passed jobs, mean (h)", &|r| {
            format!("{:.2}", r.jct_passed_s.mean / 3600.0)
        });
    }

    /// Where GPU time went: failed attempts, spreading, each status.
    fn gpu_time(&mut self) {
        self.row("failed-attempt GPU-hours", &|r| {
            format!("{:.0}", r.failed_attempt_gpu_s as f64 / 3600.0)
        });
        self.row("GPU-hours lost to spreading", &|r| {
            format!("{:.0}", r.spread_slowdown_gpu_s as f64 / 3600.0)
        });
        self.row("GPU time passed/killed/failed", &|r| {
            let total: u64 = r.gpu_s_by_status.values().sum();
            if total == 0 {
                return "n/a (no finished jobs)".to_string();
            }
            let pct = |k: &str| {
                r.gpu_s_by_status.get(k).copied().unwrap_or(0) as f64 / total as f64 * 100.0
            };
            format!(
                "{:.1} / {:.1} / {:.1} %",
                pct("passed"),
                pct("killed"),
                pct("failed")
            )
        });
    }

    /// What the reclaim, defragment and retry slots cost and saved.
    fn slot_costs(&mut self) {
        self.row("preemptions / GPU-h lost restarting", &|r| {
            format!(
                "{} / {:.0}",
                r.reclaim.preemptions,
                r.reclaim.restart_gpu_s as f64 / 3600.0
            )
        });
        self.row("migrations / GPU-h lost restarting", &|r| {
            format!(
                "{} / {:.0}",
                r.defragment.migrations,
                r.defragment.restart_gpu_s as f64 / 3600.0
            )
        });
        self.row("retries avoided / GPU-h saved / passing lost", &|r| {
            format!(
                "{} / {:.0} / {}",
                r.retry.attempts_avoided,
                r.retry.saved_gpu_s as f64 / 3600.0,
                r.retry.passing_jobs_lost
            )
        });
    }

    /// On a cluster of several GPU types: the makespan, the waits, and
    /// each type's utilisation.
    fn gpu_types(&mut self) {
        self.row(
            "makespan (h) / total wait p90 (h)",
            &|r| match &r.gpu_types {
                Some(g) => format!(
                    "{:.0} / {:.2}",
                    g.makespan_s as f64 / 3600.0,
                    g.total_wait_s.p90 / 3600.0
                ),
                None => "n/a".to_string(),
            },
        );
        self.row("utilisation by GPU type", &|r| match &r.gpu_types {
            Some(g) => g
                .types
                .iter()
                .map(|t| format!("{} {:.1} %", t.name, t.utilisation * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
            None => "n/a".to_string(),
        });
    }

    /// Size bucket `b`'s queue delays and fragmentation shares.
    fn bucket(&mut self, b: &str) {
        self.row(&format!("[{b} GPU] queue p50 / p90 (min)"), &|r| {
            let d = &r.by_size[b].queue_delay_s;
            format!("{} / {}", minutes(d.p50), minutes(d.p90))
        });
        self.row(
            &format!("[{b} GPU] fragmentation share (events / time)"),
            &|r| r.by_size[b].table2(),
        );
    }

    /// The rows as aligned text, one line each.
    fn render(self) -> String {
        let label_w = self.rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let col_w: Vec<usize> = (0..self.runs.len())
            .map(|i| self.rows.iter().map(|r| r.1[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (label, cells) in self.rows {
            out.push_str(&format!("{label:<label_w$}"));
            for (c, w) in cells.iter().zip(&col_w) {
                out.push_str(&format!("  {c:>w$}"));
            }
            out.push('\n');
        }
        out
    }
}
