//! Memory stays flat over a million submitted-and-finished jobs when the
//! host forgets finished jobs, and grows with history when it does not.
//!
//! Measured as the process's resident set (Linux `/proc/self/statm`), in its
//! own test binary so no other test shares the process. Memory that the
//! allocator once held stays resident, so "flat" means: after a warm-up, a
//! million more jobs add less than a small fixed allowance. The second half
//! checks that the measurement can fail: keeping 200,000 finished records
//! makes the resident set grow by far more than that allowance.
#![allow(clippy::unwrap_used)]

use gangway_core::{AttemptEnd, JobSpec, Scheduler, Topology};
use gangway_plugin_sdk::JobId;

/// Resident set size in bytes, if the platform tells.
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Runs `jobs` jobs through the scheduler in waves that fill the cluster:
/// submit, one round, end every attempt, and forget the finished ones if
/// `forget`. Returns the next free id.
fn churn(sched: &mut Scheduler, first_id: u64, jobs: u64, forget: bool, now: &mut u64) -> u64 {
    let vcs = [sched.virtual_cluster("a"), sched.virtual_cluster("b")];
    let mut id = first_id;
    let end = first_id + jobs;
    while id < end {
        let wave: Vec<JobId> = (id..(id + 40).min(end)).map(JobId).collect();
        for (k, job) in wave.iter().enumerate() {
            let spec = JobSpec {
                id: *job,
                vc: vcs[k % 2],
                user: k as u32 % 7,
                gpus: [1, 2, 1, 4][k % 4],
                submitted_s: *now,
            };
            sched.submit(spec).unwrap();
        }
        *now += 1;
        let report = sched.round(*now).unwrap();
        assert_eq!(
            report.starts.len(),
            wave.len(),
            "every wave fits the cluster"
        );
        *now += 1;
        for job in &wave {
            sched.end_attempt(*job, *now, AttemptEnd::Passed).unwrap();
            if forget {
                sched.forget(*job).unwrap();
            }
        }
        id += wave.len() as u64;
    }
    id
}

#[test]
fn memory_is_flat_over_a_million_forgotten_jobs() {
    let Some(start) = rss_bytes() else {
        println!("SKIPPED: /proc/self/statm is not readable here; cannot measure memory");
        return;
    };
    // 4 racks x 4 servers x 8 GPUs = 128 GPUs; a wave of 40 jobs takes 80.
    let mut sched = Scheduler::new(Topology::uniform(4, 4, 8).unwrap());
    let mut now = 0;
    let mut id = churn(&mut sched, 0, 50_000, true, &mut now);
    let warm = rss_bytes().unwrap();
    let mut peak = warm;
    for _ in 0..10 {
        id = churn(&mut sched, id, 100_000, true, &mut now);
        peak = peak.max(rss_bytes().unwrap());
    }
    assert_eq!(id, 1_050_000);
    assert!(sched.jobs().is_empty());
    sched.check_invariants().unwrap();
    let allowance = 4 << 20;
    println!(
        "resident set: {} KiB at start, {} KiB after 50k jobs, peak {} KiB over 1M more",
        start >> 10,
        warm >> 10,
        peak >> 10
    );
    assert!(
        peak <= warm + allowance,
        "memory grew by {} KiB over 1M forgotten jobs",
        (peak - warm) >> 10
    );

    // Without forgetting, the same churn keeps every record: memory grows.
    let before = rss_bytes().unwrap();
    churn(&mut sched, id, 200_000, false, &mut now);
    let after = rss_bytes().unwrap();
    assert_eq!(sched.jobs().len(), 200_000);
    println!(
        "keeping 200k finished records: {} KiB -> {} KiB",
        before >> 10,
        after >> 10
    );
    assert!(
        after > before + 2 * allowance,
        "keeping 200k records grew memory by only {} KiB: the measurement cannot see growth",
        after.saturating_sub(before) >> 10
    );
}
