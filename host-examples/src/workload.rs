//! The built-in Philly-calibrated workload generator and the Philly-sized
//! default topology, so the replay's main job needs no files.
//!
//! Every number below comes from `PHILLY.md` (the study's facts, derived from
//! Microsoft's public trace); the section is named next to each table.

use gangway_core::{FailureClass, RackGrouping, Topology, TopologyError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::trace::{Attempt, Outcome, Trace, TraceJob};

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

/// Virtual clusters: (name, % of jobs, % of them multi-GPU) (section 5.3).
const VC_MIX: [(&str, f64, f64); 11] = [
    ("6214e9", 50.1, 0.9),
    ("11cb48", 19.6, 9.2),
    ("6c71a0", 12.1, 9.0),
    ("b436b2", 9.0, 2.5),
    ("103959", 2.4, 18.8),
    ("ee9e8c", 1.8, 60.5),
    ("0e4a51", 1.7, 24.0),
    ("ed69ec", 1.4, 0.0),
    ("7f04ca", 0.9, 71.8),
    ("2869ce", 0.5, 84.8),
    ("e13805", 0.5, 42.5),
];

/// Final status mix: Passed / Killed / Unsuccessful (section 3.6, Table 6).
const STATUS_MIX: [(Outcome, f64); 3] = [
    (Outcome::Passed, 69.3),
    (Outcome::Killed, 13.5),
    (Outcome::Failed, 17.2),
];

/// Attempts per job: 1..5 (section 2.2, Pass jobs of >= 4 GPUs).
const ATTEMPTS_MIX: [f64; 5] = [73.1, 14.6, 5.9, 4.0, 2.4];

/// Attempts of jobs that end unsuccessful. Assumption: Table 7 shows failures
/// repeat (1.0 to 4.3 trials per failing job), so retries are more common.
const FAILED_ATTEMPTS_MIX: [f64; 5] = [45.0, 20.0, 15.0, 10.0, 10.0];

/// Runtime-to-failure quantiles in minutes at [`RTF_PROBS`]: the trial-weighted
/// medians of Table 7 cluster around 1-2 minutes, the p90s spread from 5 to
/// thousands of minutes (section 3.7).
const RTF_MINUTES: [f64; 5] = [0.12, 1.9, 20.0, 400.0, 3_000.0];
const RTF_PROBS: [f64; 5] = [0.0, 0.5, 0.75, 0.9, 1.0];

/// Failure reasons by trials (section 3.7, Table 7). A job that ends
/// unsuccessful fails every attempt for one reason drawn from all of them
/// (the study: failures repeat for the same job).
const FAILURE_MIX: [(FailureClass, f64); 22] = [
    (FailureClass::CpuOutOfMemory, 12_076.0),
    (FailureClass::IncorrectInputs, 9_690.0),
    (FailureClass::SemanticError, 2_943.0),
    (FailureClass::CoreDump, 2_912.0),
    (FailureClass::InvalidMemoryAccess, 2_602.0),
    (FailureClass::ModelCheckpointError, 1_995.0),
    (FailureClass::CudaFailure, 1_484.0),
    (FailureClass::SyntaxError, 1_132.0),
    (FailureClass::TracebackFromCrash, 777.0),
    (FailureClass::MpiError, 634.0),
    (FailureClass::GpuOutOfMemory, 487.0),
    (FailureClass::MpiRuntimeFailure, 478.0),
    (FailureClass::PermissionError, 299.0),
    (FailureClass::ImportError, 148.0),
    (FailureClass::JobPreempted, 147.0),
    (FailureClass::CudaInitFailed, 141.0),
    (FailureClass::ModelDiverged, 84.0),
    (FailureClass::CudaVersionMismatch, 49.0),
    (FailureClass::GpuEccError, 10.0),
    (FailureClass::OutputNodeError, 3.0),
    (FailureClass::CannotLoadLibs, 1.0),
    (FailureClass::NoSignature, 1_684.0),
];

/// Reasons of failed attempts that a later attempt of the same job gets
/// past (Table 7's infrastructure and flaky reasons, by trials). An
/// assumption of the model: a programming or input error (syntax, import,
/// semantic, permission, incorrect inputs, version mismatch) does not pass
/// on a plain retry, so it never precedes a passing attempt.
const TRANSIENT_MIX: [(FailureClass, f64); 11] = [
    (FailureClass::CoreDump, 2_912.0),
    (FailureClass::InvalidMemoryAccess, 2_602.0),
    (FailureClass::ModelCheckpointError, 1_995.0),
    (FailureClass::CudaFailure, 1_484.0),
    (FailureClass::TracebackFromCrash, 777.0),
    (FailureClass::MpiError, 634.0),
    (FailureClass::MpiRuntimeFailure, 478.0),
    (FailureClass::JobPreempted, 147.0),
    (FailureClass::CudaInitFailed, 141.0),
    (FailureClass::GpuEccError, 10.0),
    (FailureClass::NoSignature, 1_684.0),
];

fn pick<T: Copy>(rng: &mut impl Rng, items: &[(T, f64)]) -> T {
    let total: f64 = items.iter().map(|i| i.1).sum();
    let mut x = rng.random::<f64>() * total;
    for &(item, w) in items {
        if x < w {
            return item;
        }
        x -= w;
    }
    items[items.len() - 1].0
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

fn run_seconds(rng: &mut impl Rng, gpus: u32) -> u64 {
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
    (quantile(&probs, &vals, rng.random::<f64>()) * 60.0)
        .round()
        .max(1.0) as u64
}

fn rtf_seconds(rng: &mut impl Rng) -> u64 {
    (quantile(&RTF_PROBS, &RTF_MINUTES, rng.random::<f64>()) * 60.0)
        .round()
        .max(1.0) as u64
}

/// Weights of the Philly VCs for a single- or multi-GPU job.
fn vc_weights(multi: bool) -> Vec<(&'static str, f64)> {
    VC_MIX
        .iter()
        .map(|&(name, jobs, multi_pct)| {
            let share = if multi { multi_pct } else { 100.0 - multi_pct };
            (name, jobs * share / 100.0)
        })
        .collect()
}

/// A Philly VC for a job of a file without VCs, drawn deterministically from
/// the job's id (a hash), conditioned on single- or multi-GPU (section 5.3).
pub fn philly_vc_for(job_id: &str, multi: bool) -> &'static str {
    // FNV-1a then splitmix64: stable across platforms and releases.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job_id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(h);
    pick(&mut rng, &vc_weights(multi))
}

/// Generates `jobs` jobs of a Philly-like workload, deterministically from `seed`:
/// sizes, run times, arrivals (1,666 a day with the hour-of-day profile), VCs,
/// final statuses and retries as documented on the tables above.
///
/// ```
/// let a = gangway_host_examples::workload::generate(500, 7);
/// let b = gangway_host_examples::workload::generate(500, 7);
/// assert_eq!(a, b);
/// assert_eq!(a.jobs.len(), 500);
/// ```
pub fn generate(jobs: usize, seed: u64) -> Trace {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mean_hour: f64 = HOUR_PROFILE.iter().sum::<f64>() / 24.0;
    let peak = HOUR_PROFILE.iter().copied().fold(0.0, f64::max) / mean_hour;
    let base_rate = JOBS_PER_DAY / 86_400.0; // jobs per second
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(jobs);
    let users_per_vc = 24;
    while out.len() < jobs {
        // Non-homogeneous Poisson arrivals by thinning.
        t += -(1.0 - rng.random::<f64>()).ln() / (base_rate * peak);
        let hour = ((t / 3600.0) as usize) % 24;
        if rng.random::<f64>() > HOUR_PROFILE[hour] / mean_hour / peak {
            continue;
        }
        let gpus = pick(&mut rng, &SIZE_MIX);
        let vc = pick(&mut rng, &vc_weights(gpus > 1));
        let status = pick(&mut rng, &STATUS_MIX);
        let mix = if status == Outcome::Failed {
            &FAILED_ATTEMPTS_MIX
        } else {
            &ATTEMPTS_MIX
        };
        let n = pick_index(&mut rng, mix) + 1;
        let run = run_seconds(&mut rng, gpus);
        // An unsuccessful job fails every attempt for one reason; earlier
        // failures of a job that gets past them are transient ones.
        let job_class = pick(&mut rng, &FAILURE_MIX);
        let mut attempts: Vec<Attempt> = (1..n)
            .map(|_| Attempt {
                run_s: rtf_seconds(&mut rng).min(run),
                outcome: Outcome::Failed,
                class: if status == Outcome::Failed {
                    job_class
                } else {
                    pick(&mut rng, &TRANSIENT_MIX)
                },
            })
            .collect();
        attempts.push(if status == Outcome::Failed {
            Attempt {
                run_s: rtf_seconds(&mut rng).min(run),
                outcome: Outcome::Failed,
                class: job_class,
            }
        } else {
            Attempt::new(run, status)
        });
        let user = rng.random_range(0..users_per_vc);
        out.push(TraceJob {
            name: format!("gen-{}", out.len()),
            vc: vc.to_string(),
            user: format!("{vc}-u{user}"),
            gpus,
            submit_s: t as u64,
            attempts,
        });
    }
    Trace {
        jobs: out,
        skipped: Vec::new(),
        ..Trace::default()
    }
}

/// Philly's machines as re-derived from the GPU-utilisation columns (section
/// 1.1, the revised list): 264 x 8, 271 x 4, 1 x 3 and 3 x 2 GPUs, plus 13
/// machines with no GPU data (left out) = 3,205 GPUs on 539 servers, in
/// same-SKU racks of 32 servers. Used when no machine list is given.
///
/// ```
/// let topo = gangway_host_examples::workload::philly_topology().unwrap();
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

    #[test]
    fn vc_assignment_is_stable_and_conditioned() {
        assert_eq!(philly_vc_for("42", true), philly_vc_for("42", true));
        let multi: Vec<&str> = (0..2000)
            .map(|i| philly_vc_for(&i.to_string(), true))
            .collect();
        assert!(!multi.contains(&"ed69ec"), "ed69ec runs no multi-GPU jobs");
    }
}
