//! The built-in Philly-calibrated workload generator and the Philly-sized
//! default topology, so the replay's main job needs no files.
//!
//! Every number below comes from `PHILLY.md` (the study's facts, derived from
//! Microsoft's public trace); the section is named next to each table.

use gangway_core::{FailureClass, RackGrouping, Topology, TopologyError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::trace::{Attempt, Outcome, Trace, TraceJob, pick, vc_weights};

/// Job-size mix: (GPUs, jobs) of the 111,549 jobs with a valid run time (section 2.2).
const SIZE_MIX: [(u32, f64); 9] = [
    (1, 96_662.0),
    (2, 2_522.0),
    (4, 5_487.0),
    (8, 5_716.0),
    (16, 852.0),
    (24, 40.0),
    (32, 212.0),
    (64, 28.0),
    (128, 11.0),
];

/// Run-time quantiles in minutes per size bucket (1, 2-4, 5-8, >8), at
/// probabilities [`RUN_PROBS`] (section 2.2, notebook Figure 2).
const RUN_MINUTES: [[f64; 6]; 4] = [
    [0.97, 2.13, 20.0, 65.9, 260.0, 8_895.0],
    [0.32, 1.53, 32.5, 1_094.0, 3_633.0, 24_426.0],
    [1.43, 14.7, 209.0, 1_880.0, 6_088.0, 32_362.0],
    [0.85, 9.6, 141.0, 930.0, 3_067.0, 20_683.0],
];
const RUN_PROBS: [f64; 6] = [0.10, 0.25, 0.50, 0.75, 0.90, 0.99];

/// Jobs per hour of day in the steady window 2017-10-03 .. 11-20 (section 5.1).
const HOUR_PROFILE: [f64; 24] = [
    4627.0, 3418.0, 4465.0, 3933.0, 2629.0, 4042.0, 5554.0, 6642.0, 3582.0, 2970.0, 2542.0, 2211.0,
    2050.0, 2084.0, 1328.0, 1708.0, 3708.0, 2413.0, 2370.0, 2066.0, 3425.0, 3161.0, 4507.0, 4524.0,
];

/// Arrivals per day in the steady window (section 5.1).
pub const JOBS_PER_DAY: f64 = 1_666.0;

/// Final status mix: Passed / Killed / Unsuccessful (section 3.6, Table 6).
const STATUS_MIX: [(Outcome, f64); 3] = [
    (Outcome::Passed, 69.3),
    (Outcome::Killed, 13.5),
    (Outcome::Failed, 17.2),
];

/// Attempts per job: 1..5 (section 2.2, Pass jobs of >= 4 GPUs).
const ATTEMPTS_MIX: [f64; 5] = [73.1, 14.6, 5.9, 4.0, 2.4];

/// Killed jobs draw their run time from the upper part of the Figure 2
/// distribution: quantile `u^(1/KILLED_SKEW)` for a uniform `u`. Table 6
/// (section 3.6) gives killed jobs 37.7 % of GPU time from 13.5 % of jobs,
/// about 4.3x a passed job's; 5 brings the generated GPU time by status
/// to about 47 / 38 / 15 % (passed / killed / unsuccessful; measured in
/// this module's tests).
const KILLED_SKEW: f64 = 5.0;

/// One failure reason of Table 7 (section 3.7): the class, trials, failing
/// jobs, runtime-to-failure p50 / p90 / p95 (minutes), and failed trials on
/// 1, 2-4 and >4 GPUs.
struct FailureRow {
    class: FailureClass,
    trials: f64,
    jobs: f64,
    rtf_min: [f64; 3],
    demand: [f64; 3],
}

const fn row(
    class: FailureClass,
    trials: f64,
    jobs: f64,
    rtf_min: [f64; 3],
    demand: [f64; 3],
) -> FailureRow {
    FailureRow {
        class,
        trials,
        jobs,
        rtf_min,
        demand,
    }
}

/// Table 7 (section 3.7), every row.
const TABLE7: [FailureRow; 22] = [
    row(
        FailureClass::CpuOutOfMemory,
        12_076.0,
        2_803.0,
        [13.45, 17.73, 33.97],
        [11_465.0, 235.0, 376.0],
    ),
    row(
        FailureClass::IncorrectInputs,
        9_690.0,
        4_936.0,
        [1.87, 404.83, 2_095.73],
        [5_844.0, 2_638.0, 1_208.0],
    ),
    row(
        FailureClass::SemanticError,
        2_943.0,
        2_049.0,
        [2.72, 376.0, 1_436.88],
        [1_603.0, 494.0, 846.0],
    ),
    row(
        FailureClass::CoreDump,
        2_912.0,
        1_784.0,
        [0.85, 72.75, 431.65],
        [1_936.0, 496.0, 480.0],
    ),
    row(
        FailureClass::InvalidMemoryAccess,
        2_602.0,
        1_235.0,
        [1.03, 403.5, 1_357.38],
        [712.0, 774.0, 1_116.0],
    ),
    row(
        FailureClass::ModelCheckpointError,
        1_995.0,
        948.0,
        [181.67, 3_728.93, 8_196.02],
        [743.0, 384.0, 868.0],
    ),
    row(
        FailureClass::CudaFailure,
        1_484.0,
        571.0,
        [1.32, 19.87, 82.17],
        [133.0, 1_153.0, 198.0],
    ),
    row(
        FailureClass::SyntaxError,
        1_132.0,
        883.0,
        [0.58, 5.02, 12.0],
        [780.0, 184.0, 168.0],
    ),
    row(
        FailureClass::TracebackFromCrash,
        777.0,
        271.0,
        [1.02, 894.33, 1_394.07],
        [356.0, 277.0, 144.0],
    ),
    row(
        FailureClass::MpiError,
        634.0,
        166.0,
        [1.62, 3_015.27, 5_143.98],
        [456.0, 54.0, 124.0],
    ),
    row(
        FailureClass::GpuOutOfMemory,
        487.0,
        261.0,
        [18.53, 353.62, 2_740.28],
        [237.0, 70.0, 180.0],
    ),
    row(
        FailureClass::MpiRuntimeFailure,
        478.0,
        420.0,
        [1_389.48, 13_778.6, 18_090.88],
        [240.0, 141.0, 97.0],
    ),
    row(
        FailureClass::PermissionError,
        299.0,
        151.0,
        [1.0, 8.15, 15.85],
        [56.0, 202.0, 41.0],
    ),
    row(
        FailureClass::ImportError,
        148.0,
        148.0,
        [0.67, 4.58, 10.73],
        [108.0, 30.0, 10.0],
    ),
    row(
        FailureClass::JobPreempted,
        147.0,
        95.0,
        [559.08, 2_682.85, 5_892.23],
        [25.0, 95.0, 27.0],
    ),
    row(
        FailureClass::CudaInitFailed,
        141.0,
        69.0,
        [1.08, 2.18, 4.63],
        [16.0, 66.0, 59.0],
    ),
    row(
        FailureClass::ModelDiverged,
        84.0,
        30.0,
        [1.48, 44.37, 76.53],
        [78.0, 5.0, 1.0],
    ),
    row(
        FailureClass::CudaVersionMismatch,
        49.0,
        49.0,
        [0.83, 1.65, 1.67],
        [1.0, 1.0, 47.0],
    ),
    row(
        FailureClass::GpuEccError,
        10.0,
        10.0,
        [26.82, 671.92, 2_035.02],
        [1.0, 5.0, 4.0],
    ),
    row(
        FailureClass::OutputNodeError,
        3.0,
        3.0,
        [0.85, 0.95, 0.95],
        [3.0, 0.0, 0.0],
    ),
    row(
        FailureClass::CannotLoadLibs,
        1.0,
        1.0,
        [0.12, 0.12, 0.12],
        [1.0, 0.0, 0.0],
    ),
    row(
        FailureClass::NoSignature,
        1_684.0,
        698.0,
        [1.87, 28.0, 95.17],
        [1_235.0, 294.0, 155.0],
    ),
];

/// Reasons of failed attempts that a later attempt of the same job gets
/// past (Table 7's infrastructure and flaky reasons). An assumption of the
/// model: a programming or input error (syntax, import, semantic,
/// permission, incorrect inputs, version mismatch, CPU out of memory) does
/// not pass on a plain retry, so it never precedes a passing attempt.
const TRANSIENT: [FailureClass; 11] = [
    FailureClass::CoreDump,
    FailureClass::InvalidMemoryAccess,
    FailureClass::ModelCheckpointError,
    FailureClass::CudaFailure,
    FailureClass::TracebackFromCrash,
    FailureClass::MpiError,
    FailureClass::MpiRuntimeFailure,
    FailureClass::JobPreempted,
    FailureClass::CudaInitFailed,
    FailureClass::GpuEccError,
    FailureClass::NoSignature,
];

/// Table 7's demand column index of a gang (1, 2-4, >4 GPUs).
fn demand_index(gpus: u32) -> usize {
    match gpus {
        0 | 1 => 0,
        2..=4 => 1,
        _ => 2,
    }
}

/// The share of jobs of a demand class (1, 2-4, >4 GPUs) that end
/// unsuccessful, so that the sizes of failing jobs follow Table 7's failed
/// trials by size (65 / 19 / 15 %: failing jobs are larger than jobs at
/// large) while the overall size mix (section 2.2) and the 17.2 %
/// unsuccessful share (Table 6) stay: Bayes' rule over the two tables.
fn failed_share(demand: usize) -> f64 {
    let trials: f64 = TABLE7.iter().map(|r| r.demand.iter().sum::<f64>()).sum();
    let in_class: f64 = TABLE7.iter().map(|r| r.demand[demand]).sum();
    let jobs: f64 = SIZE_MIX.iter().map(|s| s.1).sum();
    let class_jobs: f64 = SIZE_MIX
        .iter()
        .filter(|s| demand_index(s.0) == demand)
        .map(|s| s.1)
        .sum();
    let unsuccessful = STATUS_MIX[2].1 / 100.0;
    (in_class / trials * unsuccessful / (class_jobs / jobs)).min(1.0)
}

/// Runtime to failure of one attempt failing for `row`'s reason: its p50,
/// p90 and p95 as quantile knots, closed by a tenth of p50 at 0 and twice
/// p95 at 1 (section 3.7).
fn rtf_seconds(rng: &mut impl Rng, row: &FailureRow) -> u64 {
    let [p50, p90, p95] = row.rtf_min;
    let probs = [0.0, 0.5, 0.9, 0.95, 1.0];
    let vals = [p50 / 10.0, p50, p90, p95.max(p90), p95.max(p90) * 2.0];
    (quantile(&probs, &vals, rng.random::<f64>()) * 60.0)
        .round()
        .max(1.0) as u64
}

/// The Table 7 row of `class`.
fn table7(class: FailureClass) -> &'static FailureRow {
    TABLE7
        .iter()
        .find(|r| r.class == class)
        .unwrap_or(&TABLE7[TABLE7.len() - 1])
}

fn pick_index(rng: &mut impl Rng, weights: &[f64]) -> usize {
    let items: Vec<(usize, f64)> = weights.iter().copied().enumerate().collect();
    pick(rng, &items)
}

/// Inverse CDF by log-linear interpolation between quantile knots.
fn quantile(knots_p: &[f64], knots_v: &[f64], p: f64) -> f64 {
    let i = knots_p
        .iter()
        .position(|&k| k >= p)
        .unwrap_or(knots_p.len() - 1);
    if i == 0 {
        return knots_v[0];
    }
    let (p0, p1) = (knots_p[i - 1], knots_p[i]);
    let (v0, v1) = (knots_v[i - 1].ln(), knots_v[i].ln());
    let t = if p1 > p0 { (p - p0) / (p1 - p0) } else { 1.0 };
    (v0 + t * (v1 - v0)).exp()
}

fn bucket(gpus: u32) -> usize {
    match gpus {
        1 => 0,
        2..=4 => 1,
        5..=8 => 2,
        _ => 3,
    }
}

/// A run time of the Figure 2 distribution of `gpus`' bucket at quantile `u`.
fn run_seconds(u: f64, gpus: u32) -> u64 {
    let q = &RUN_MINUTES[bucket(gpus)];
    // Knots at p=0 (a third of p10) and p=1 (three times p99) close the tails.
    let probs = [
        0.0,
        RUN_PROBS[0],
        RUN_PROBS[1],
        RUN_PROBS[2],
        RUN_PROBS[3],
        RUN_PROBS[4],
        RUN_PROBS[5],
        1.0,
    ];
    let vals = [q[0] / 3.0, q[0], q[1], q[2], q[3], q[4], q[5], q[5] * 3.0];
    (quantile(&probs, &vals, u) * 60.0).round().max(1.0) as u64
}

/// Generates `jobs` jobs of a Philly-like workload, deterministically from `seed`:
/// sizes, run times, arrivals (1,666 a day with the hour-of-day profile), VCs,
/// final statuses and retries as documented on the tables above, with run
/// time depending on the final status ([`generate_with`] with
/// `status_runtimes` on).
///
/// ```
/// let a = gangway_replay::workload::generate(500, 7);
/// let b = gangway_replay::workload::generate(500, 7);
/// assert_eq!(a, b);
/// assert_eq!(a.jobs.len(), 500);
/// ```
pub fn generate(jobs: usize, seed: u64) -> Trace {
    generate_with(jobs, seed, true)
}

/// [`generate`], choosing whether run time depends on the final status.
///
/// With `status_runtimes` (the Philly model, Table 6 and 7): killed jobs
/// run long ([`KILLED_SKEW`]), an unsuccessful job's size follows Table 7's
/// failed trials by size, its reason is drawn from the rows of its size, it
/// fails `trials / jobs` times on average for that reason (at most 5) and
/// each attempt runs that reason's runtime to failure. Without: every
/// status draws the same run time and unsuccessful jobs are as large as any
/// (the model before calibration, to compare).
pub fn generate_with(jobs: usize, seed: u64, status_runtimes: bool) -> Trace {
    let mut g = Generator::new(seed, status_runtimes);
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(jobs);
    while out.len() < jobs {
        t = g.next_arrival(t);
        if g.thinned_out(t) {
            continue;
        }
        out.push(g.job(out.len(), t));
    }
    Trace {
        jobs: out,
        skipped: Vec::new(),
        ..Trace::default()
    }
}

/// [`generate_with`]'s draws: one seeded generator, and the model's
/// figures worked out once.
struct Generator {
    rng: ChaCha8Rng,
    /// Run time depends on the final status (the Philly model).
    status_runtimes: bool,
    /// The mean of [`HOUR_PROFILE`].
    mean_hour: f64,
    /// The busiest hour's rate over the mean.
    peak: f64,
    /// The share of failed jobs by demand ([`demand_index`]).
    failed_by_demand: [f64; 3],
    /// Transient failure classes, weighted by their trials.
    transient: Vec<(FailureClass, f64)>,
}

impl Generator {
    /// Users per VC (an `i32`, the type the draw has always used).
    const USERS_PER_VC: i32 = 24;

    /// A generator seeded with `seed`.
    fn new(seed: u64, status_runtimes: bool) -> Self {
        let mean_hour: f64 = HOUR_PROFILE.iter().sum::<f64>() / 24.0;
        Generator {
            rng: ChaCha8Rng::seed_from_u64(seed),
            status_runtimes,
            mean_hour,
            peak: HOUR_PROFILE.iter().copied().fold(0.0, f64::max) / mean_hour,
            failed_by_demand: [failed_share(0), failed_share(1), failed_share(2)],
            transient: TRANSIENT.iter().map(|&c| (c, table7(c).trials)).collect(),
        }
    }

    /// The next candidate arrival after `t`, at the peak rate.
    fn next_arrival(&mut self, t: f64) -> f64 {
        let base_rate = JOBS_PER_DAY / 86_400.0; // jobs per second
        t + -(1.0 - self.rng.random::<f64>()).ln() / (base_rate * self.peak)
    }

    /// Whether the candidate arrival at `t` is dropped: non-homogeneous
    /// Poisson arrivals by thinning to the hour's rate.
    fn thinned_out(&mut self, t: f64) -> bool {
        let hour = ((t / 3600.0) as usize) % 24;
        self.rng.random::<f64>() > HOUR_PROFILE[hour] / self.mean_hour / self.peak
    }

    /// Job number `index`, submitted at `t`.
    fn job(&mut self, index: usize, t: f64) -> TraceJob {
        let gpus = pick(&mut self.rng, &SIZE_MIX);
        let vc = pick(&mut self.rng, &vc_weights(gpus > 1));
        let demand = demand_index(gpus);
        let status = self.status(demand);
        let u = self.rng.random::<f64>();
        let attempts = if status == Outcome::Failed {
            self.failed_attempts(gpus, demand, u)
        } else {
            self.attempts(gpus, status, u)
        };
        let user = self.rng.random_range(0..Self::USERS_PER_VC);
        TraceJob {
            work: None,
            name: format!("gen-{index}"),
            vc: vc.to_string(),
            user: format!("{vc}-u{user}"),
            gpus,
            submit_s: t as u64,
            attempts,
        }
    }

    /// A final status for a job of `demand`.
    fn status(&mut self, demand: usize) -> Outcome {
        if !self.status_runtimes {
            return pick(&mut self.rng, &STATUS_MIX);
        }
        let f = self.failed_by_demand[demand];
        let rest = (STATUS_MIX[0].1 + STATUS_MIX[1].1) / 100.0;
        pick(
            &mut self.rng,
            &[
                (Outcome::Passed, (1.0 - f) * STATUS_MIX[0].1 / 100.0 / rest),
                (Outcome::Killed, (1.0 - f) * STATUS_MIX[1].1 / 100.0 / rest),
                (Outcome::Failed, f),
            ],
        )
    }

    /// The attempts of a failed job of `gpus` (`demand`), at run-time
    /// quantile `u`. The reason: Table 7's failing jobs of this size
    /// (trials on this size divided by trials per job); without status run
    /// times, by trials alone.
    fn failed_attempts(&mut self, gpus: u32, demand: usize, u: f64) -> Vec<Attempt> {
        let status_runtimes = self.status_runtimes;
        let weights: Vec<(usize, f64)> = TABLE7
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let w = if status_runtimes {
                    r.demand[demand] * r.jobs / r.trials
                } else {
                    r.trials
                };
                (i, w)
            })
            .collect();
        let reason = &TABLE7[pick(&mut self.rng, &weights)];
        let per_job = reason.trials / reason.jobs;
        let n = if status_runtimes {
            let whole = per_job.floor();
            let extra = self.rng.random::<f64>() < per_job - whole;
            (whole as usize + usize::from(extra)).clamp(1, 5)
        } else {
            pick_index(&mut self.rng, &ATTEMPTS_MIX) + 1
        };
        let cap = run_seconds(u, gpus);
        (0..n)
            .map(|_| {
                let rtf = rtf_seconds(&mut self.rng, reason);
                Attempt {
                    run_s: if status_runtimes { rtf } else { rtf.min(cap) },
                    outcome: Outcome::Failed,
                    class: reason.class,
                }
            })
            .collect()
    }

    /// The attempts of a job of `gpus` that ends `status` (passed or
    /// killed), at run-time quantile `u`: earlier failures of a job that
    /// gets past them are transient.
    fn attempts(&mut self, gpus: u32, status: Outcome, u: f64) -> Vec<Attempt> {
        let n = pick_index(&mut self.rng, &ATTEMPTS_MIX) + 1;
        let q = if status == Outcome::Killed && self.status_runtimes {
            u.powf(1.0 / KILLED_SKEW)
        } else {
            u
        };
        let run = run_seconds(q, gpus);
        let mut a: Vec<Attempt> = (1..n)
            .map(|_| {
                let class = pick(&mut self.rng, &self.transient);
                Attempt {
                    run_s: rtf_seconds(&mut self.rng, table7(class)).min(run),
                    outcome: Outcome::Failed,
                    class,
                }
            })
            .collect();
        a.push(Attempt::new(run, status));
        a
    }
}

/// Philly's machines as re-derived from the GPU-utilisation columns (section
/// 1.1, the revised list): 264 x 8, 271 x 4, 1 x 3 and 3 x 2 GPUs, plus 13
/// machines with no GPU data (left out) = 3,205 GPUs on 539 servers, in
/// same-SKU racks of 32 servers. Used when no machine list is given.
///
/// ```
/// let topo = gangway_replay::workload::philly_topology().unwrap();
/// assert_eq!(topo.total_gpus(), 3_205);
/// assert_eq!(topo.servers().len(), 539);
/// ```
pub fn philly_topology() -> Result<Topology, TopologyError> {
    let mut text = String::from("machineId,number of GPUs\n");
    let mut m = 0;
    for (count, gpus) in [(264, 8), (271, 4), (1, 3), (3, 2)] {
        for _ in 0..count {
            text.push_str(&format!("m{m},{gpus}\n"));
            m += 1;
        }
    }
    Topology::from_machine_list_str(
        "built-in Philly machine list",
        &text,
        RackGrouping::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_mix_matches_the_study() {
        let t = generate(40_000, 1);
        let n = t.jobs.len() as f64;
        let single = t.jobs.iter().filter(|j| j.gpus == 1).count() as f64 / n;
        assert!((single - 0.8665).abs() < 0.01, "1-GPU share {single}");
        let mut runs: Vec<u64> = t
            .jobs
            .iter()
            .filter(|j| {
                j.gpus == 1
                    && j.attempts
                        .last()
                        .is_some_and(|a| a.outcome == Outcome::Passed)
            })
            .map(|j| j.attempts.last().map_or(0, |a| a.run_s))
            .collect();
        runs.sort_unstable();
        let p50 = runs[runs.len() / 2] as f64 / 60.0;
        assert!((15.0..27.0).contains(&p50), "1-GPU median run {p50} min");
        let days = t.jobs.last().map_or(0, |j| j.submit_s) as f64 / 86_400.0;
        let per_day = n / days;
        assert!((1_500.0..1_850.0).contains(&per_day), "{per_day} jobs/day");
        let passed = t
            .jobs
            .iter()
            .filter(|j| {
                j.attempts
                    .last()
                    .is_some_and(|a| a.outcome == Outcome::Passed)
            })
            .count() as f64
            / n;
        assert!((passed - 0.693).abs() < 0.01, "pass share {passed}");
    }

    /// GPU time (all attempts) by final status of a generated trace, in %.
    fn gpu_time_by_status(t: &Trace) -> [f64; 3] {
        let mut by = [0.0f64; 3];
        for j in &t.jobs {
            let gpu_s: u64 = j.run_s() * u64::from(j.gpus);
            let k = match j.attempts.last().map(|a| a.outcome) {
                Some(Outcome::Passed) => 0,
                Some(Outcome::Killed) => 1,
                _ => 2,
            };
            by[k] += gpu_s as f64;
        }
        let total: f64 = by.iter().sum();
        by.map(|x| x / total * 100.0)
    }

    #[test]
    fn gpu_time_by_status_follows_table6() {
        let t = generate(50_000, 1);
        let [p, k, f] = gpu_time_by_status(&t);
        // Table 6: 44.5 / 37.7 / 17.8 %.
        assert!((p - 44.5).abs() < 10.0, "passed {p:.1} %");
        assert!((k - 37.7).abs() < 10.0, "killed {k:.1} %");
        assert!((f - 17.8).abs() < 10.0, "unsuccessful {f:.1} %");
        // Without status run times the passed share is far above.
        let [p0, _, f0] = gpu_time_by_status(&generate_with(50_000, 1, false));
        assert!(p0 > p + 15.0 && f0 < f, "off: {p0:.1} / {f0:.1} %");
        // Failing jobs are larger than jobs at large (Table 7 by size).
        let failing = t.jobs.iter().filter(|j| {
            j.attempts
                .last()
                .is_some_and(|a| a.outcome == Outcome::Failed)
        });
        let (n, multi) = failing.fold((0, 0), |(n, m), j| (n + 1, m + usize::from(j.gpus > 1)));
        assert!(
            multi as f64 / n as f64 > 0.25,
            "{multi} of {n} failing jobs multi-GPU"
        );
    }

    #[test]
    fn hour_profile_shapes_arrivals() {
        let t = generate(30_000, 3);
        let mut by_hour = [0u32; 24];
        for j in &t.jobs {
            by_hour[((j.submit_s / 3600) % 24) as usize] += 1;
        }
        // The busiest hour of the profile (07) sees far more than the quietest (14).
        assert!(by_hour[7] > 3 * by_hour[14], "{by_hour:?}");
    }
}
