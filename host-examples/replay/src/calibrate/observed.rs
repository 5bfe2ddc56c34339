//! Targets observed in a cluster's own job log (`replay targets`): what
//! `replay calibrate --targets FILE` then fits the model to.
//!
//! From a Philly-format `cluster_job_log` (the one supported format that
//! records when and where attempts ran) it measures, as the study's
//! notebook does (PHILLY.md 2.1): the first-attempt wait (first attempt's
//! start minus submission) by the study's size buckets, the share of first
//! attempts on one server for gangs that fit on one, and GPU time (GPUs
//! times the attempts' run time) by final status. Table 2's shares are not
//! in any log (it records no wait reasons), so a derived file has none.

use std::collections::BTreeMap;
use std::path::Path;

use super::fit::percentile;
use super::targets::{FirstWait, GpuTimeByStatus, OneServer, Targets, Tolerance};
use crate::trace::{Outcome, Recorded, TraceError, TraceJob, read_philly_recorded};

/// Fewest jobs of a size bucket for its wait quantiles p50-p90 to be a
/// target; p99 needs [`MIN_JOBS_P99`].
pub const MIN_JOBS: usize = 20;
/// Fewest jobs of a size bucket for its p99 to be a target.
pub const MIN_JOBS_P99: usize = 200;

/// The study's size buckets (PHILLY.md 2.1, cell 7): name and GPUs.
const BUCKETS: [(&str, [u32; 2]); 4] = [
    ("1", [1, 1]),
    ("2-4", [2, 4]),
    ("5-8", [5, 8]),
    (">8", [9, u32::MAX]),
];

/// What to measure in a log.
#[derive(Clone, Debug, PartialEq)]
pub struct ObserveOptions {
    /// The targets' name (reports show it).
    pub name: String,
    /// Only jobs whose attempts ran this long in all count for the waits
    /// (the Philly targets use 600 s: the study's large jobs of 10 minutes
    /// or more).
    pub min_run_s: u64,
}

impl Default for ObserveOptions {
    fn default() -> Self {
        ObserveOptions {
            name: "observed".into(),
            min_run_s: 0,
        }
    }
}

/// The targets a Philly-format job log shows, read from `path`.
pub fn targets_from_log(path: &Path, options: &ObserveOptions) -> Result<Targets, TraceError> {
    let (file, input) = crate::trace::open(path)?;
    targets_from_read(&file, input, options)
}

/// [`targets_from_log`] from `input`, naming it `file`.
///
/// ```
/// use gangway_replay::calibrate::observed::{targets_from_read, ObserveOptions};
/// let job = |id: u32, wait_s: u32| format!(
///     r#"{{"status": "Pass", "vc": "a", "jobid": "j{id}", "submitted_time": "2017-10-07 01:00:00",
///         "attempts": [{{"start_time": "2017-10-07 01:{:02}:{:02}", "end_time": "2017-10-07 03:00:00",
///         "detail": [{{"ip": "m1", "gpus": ["gpu0", "gpu1"]}}]}}]}}"#, wait_s / 60, wait_s % 60);
/// let log = format!("[{}]", (0..40).map(|i| job(i, i * 60)).collect::<Vec<_>>().join(","));
/// let t = targets_from_read("log.json", log.as_bytes(), &ObserveOptions::default()).unwrap();
/// let two_four = t.first_wait.iter().find(|w| w.name == "2-4").unwrap();
/// assert_eq!(two_four.p50, Some(19.0)); // waits of 0..39 minutes, nearest rank
/// assert_eq!(two_four.p99, None);       // too few jobs for a p99
/// assert_eq!(t.one_server[0].share, 100.0);
/// ```
pub fn targets_from_read(
    file: &str,
    input: impl std::io::Read,
    options: &ObserveOptions,
) -> Result<Targets, TraceError> {
    let (trace, recorded) = read_philly_recorded(file, input)?;
    let jobs: Vec<(&TraceJob, &Recorded)> = trace.jobs.iter().zip(&recorded).collect();
    Ok(Targets {
        name: options.name.clone(),
        source: format!(
            "{file}: {} jobs ({} skipped as unreplayable); first-attempt waits of jobs that ran \
             {} s or more; no Table 2 shares (a log records no wait reasons)",
            trace.jobs.len(),
            trace.skipped.len(),
            options.min_run_s
        ),
        tolerance: Tolerance::default(),
        first_wait: first_waits(&jobs, options.min_run_s),
        table2: Vec::new(),
        one_server: one_server_shares(&jobs),
        gpu_time_by_status: gpu_time_by_status(&jobs),
    })
}

/// Whether job `j`'s gang size is within `gpus` (inclusive).
fn in_bucket(gpus: [u32; 2], j: &TraceJob) -> bool {
    (gpus[0]..=gpus[1]).contains(&j.gpus)
}

/// Each size bucket's first-attempt wait quantiles, over the jobs that ran
/// `min_run_s` or more (buckets with fewer than [`MIN_JOBS`] left out).
fn first_waits(jobs: &[(&TraceJob, &Recorded)], min_run_s: u64) -> Vec<FirstWait> {
    let mut first_wait = Vec::new();
    for (name, gpus) in BUCKETS {
        let mut waits: Vec<u64> = jobs
            .iter()
            .filter(|(j, _)| in_bucket(gpus, j) && j.run_s() >= min_run_s)
            .filter_map(|(_, r)| r.first_wait_s)
            .collect();
        if waits.len() < MIN_JOBS {
            continue;
        }
        waits.sort_unstable();
        // Nearest rank, as the fit measures the model's.
        let minutes = |p| percentile(&waits, p).map(|s| round3(s as f64 / 60.0));
        first_wait.push(FirstWait {
            name: name.to_string(),
            gpus,
            min_run_s,
            p50: minutes(50),
            p75: minutes(75),
            p90: minutes(90),
            p99: (waits.len() >= MIN_JOBS_P99).then(|| minutes(99)).flatten(),
        });
    }
    first_wait
}

/// The share of first attempts on one server, for gangs that fit on one
/// server of 8 GPUs.
fn one_server_shares(jobs: &[(&TraceJob, &Recorded)]) -> Vec<OneServer> {
    let mut one_server = Vec::new();
    for gpus in [[2, 4], [5, 8]] {
        let spans: Vec<u32> = jobs
            .iter()
            .filter(|(j, _)| in_bucket(gpus, j))
            .filter_map(|(_, r)| r.first_servers)
            .collect();
        if spans.len() >= MIN_JOBS {
            let on_one = spans.iter().filter(|s| **s == 1).count();
            one_server.push(OneServer {
                gpus,
                share: round3(on_one as f64 / spans.len() as f64 * 100.0),
            });
        }
    }
    one_server
}

/// The shares of GPU time by the jobs' final status (none if every job
/// passed: the log records no statuses).
fn gpu_time_by_status(jobs: &[(&TraceJob, &Recorded)]) -> Option<GpuTimeByStatus> {
    let mut by_status: BTreeMap<&str, u64> = BTreeMap::new();
    for (j, _) in jobs {
        let status = match j.attempts.last().map(|a| a.outcome) {
            Some(Outcome::Passed) | None => "passed",
            Some(Outcome::Killed) => "killed",
            Some(Outcome::Failed) => "failed",
        };
        *by_status.entry(status).or_default() += u64::from(j.gpus).saturating_mul(j.run_s());
    }
    let total: u64 = by_status.values().sum();
    let share =
        |s: &str| round3(by_status.get(s).copied().unwrap_or(0) as f64 / total as f64 * 100.0);
    (total > 0 && by_status.keys().any(|s| *s != "passed")).then(|| GpuTimeByStatus {
        passed: share("passed"),
        killed: share("killed"),
        failed: share("failed"),
    })
}

/// The targets as a targets file (TOML), with a header saying where they
/// come from.
pub fn to_toml(targets: &Targets) -> Result<String, toml::ser::Error> {
    Ok(format!(
        "# Targets observed in a job log by `replay targets` (the format:\n\
         # host-examples/replay/src/calibrate/philly-targets.toml). Edit freely; use with\n\
         # `replay calibrate --targets FILE` or `replay --fit FILE`.\n{}",
        toml::to_string(targets)?
    ))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log line: a job of `gpus` GPUs over `servers` servers submitted at
    /// 01:00:00, its first attempt starting `wait_s` later and running an
    /// hour, ending with `status`.
    fn job(id: usize, gpus: usize, servers: usize, wait_s: u64, status: &str) -> String {
        let at = |s: u64| {
            format!(
                "2017-10-07 {:02}:{:02}:{:02}",
                1 + s / 3600,
                s / 60 % 60,
                s % 60
            )
        };
        let per = gpus / servers;
        let detail: Vec<String> = (0..servers)
            .map(|m| {
                let g: Vec<String> = (0..per).map(|g| format!("\"gpu{g}\"")).collect();
                format!(r#"{{"ip": "m{m}", "gpus": [{}]}}"#, g.join(","))
            })
            .collect();
        format!(
            r#"{{"status": "{status}", "vc": "a", "jobid": "j{id}", "submitted_time": "{}",
                "attempts": [{{"start_time": "{}", "end_time": "{}", "detail": [{}]}}]}}"#,
            at(0),
            at(wait_s),
            at(wait_s + 3600),
            detail.join(",")
        )
    }

    fn log(jobs: &[String]) -> String {
        format!("[{}]", jobs.join(",\n"))
    }

    #[test]
    fn waits_placements_and_statuses_are_measured_as_the_fit_measures_the_model() {
        let mut jobs = Vec::new();
        // 200 jobs of 8 GPUs waiting 0..199 minutes, a quarter on 2 servers.
        for i in 0..200 {
            let servers = if i % 4 == 0 { 2 } else { 1 };
            jobs.push(job(i, 8, servers, i as u64 * 60, "Pass"));
        }
        // 30 jobs of 16 GPUs, killed, waiting 10 minutes each.
        for i in 200..230 {
            jobs.push(job(i, 16, 2, 600, "Killed"));
        }
        // 5 single-GPU jobs: too few for a target.
        for i in 230..235 {
            jobs.push(job(i, 1, 1, 30, "Failed"));
        }
        let t = targets_from_read(
            "log.json",
            log(&jobs).as_bytes(),
            &ObserveOptions::default(),
        )
        .unwrap();
        let names: Vec<&str> = t.first_wait.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["5-8", ">8"]);
        let big = &t.first_wait[0];
        assert_eq!(
            (big.p50, big.p75, big.p90, big.p99),
            (Some(99.0), Some(149.0), Some(179.0), Some(197.0))
        );
        assert_eq!(t.first_wait[1].p50, Some(10.0));
        assert_eq!(t.first_wait[1].p99, None, "30 jobs: no p99");
        assert_eq!(
            t.one_server,
            vec![OneServer {
                gpus: [5, 8],
                share: 75.0
            }]
        );
        let g = t.gpu_time_by_status.as_ref().unwrap();
        // 8 x 200 + 16 x 30 GPU-hours, and 5 single-GPU hours failed.
        let total = (1600 + 480 + 5) as f64;
        assert_eq!(g.passed, round3(1600.0 / total * 100.0));
        assert_eq!(g.killed, round3(480.0 / total * 100.0));
        assert_eq!(g.failed, round3(5.0 / total * 100.0));
        assert!(t.table2.is_empty());
        assert!(t.source.contains("235 jobs"), "{}", t.source);

        // Written as a targets file, it reads back the same.
        let text = to_toml(&t).unwrap();
        assert_eq!(Targets::parse(&text, "derived.toml").unwrap(), t);
    }

    #[test]
    fn a_run_time_floor_leaves_short_jobs_out() {
        let jobs: Vec<String> = (0..40)
            .map(|i| job(i, 4, 1, i as u64 * 60, "Pass"))
            .collect();
        let long = ObserveOptions {
            min_run_s: 7200,
            ..ObserveOptions::default()
        };
        let t = targets_from_read("log.json", log(&jobs).as_bytes(), &long).unwrap();
        assert!(t.first_wait.is_empty(), "every job ran an hour");
        let t = targets_from_read(
            "log.json",
            log(&jobs).as_bytes(),
            &ObserveOptions::default(),
        )
        .unwrap();
        assert_eq!(t.first_wait[0].min_run_s, 0);
        assert_eq!(t.first_wait[0].p50, Some(19.0));
    }

    #[test]
    fn a_bad_log_names_the_file_and_job() {
        let bad = r#"[{"status": "Pass", "vc": "a", "jobid": "app_9", "submitted_time": "later", "attempts": []}]"#;
        let e = targets_from_read("mine.json", bad.as_bytes(), &ObserveOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("mine.json: job app_9: submitted_time"), "{e}");
        let e = targets_from_read("empty.json", "[]".as_bytes(), &ObserveOptions::default())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "empty.json: no replayable jobs");
    }
}
