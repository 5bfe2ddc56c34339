//! Hot-swap policies under load: a scheduler serves a stream of Philly-like
//! jobs on a 512-GPU cluster while another thread, holding only the slots'
//! `SlotHandle`s, swaps the fairness policy between Wasm modules, stages a
//! broken policy that the guard quarantines, and rolls back. A swap takes
//! effect at the start of the next round; no job is lost or started twice,
//! and the invariants hold after every round.
//!
//! `cargo run -p gangway-embed --example hot_swap_under_load`
//! (also run by `cargo test`).

use std::collections::BTreeMap;
use std::sync::mpsc;

use gangway_core::policy::{Native, PolicySet, SlotHandle};
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_core::{AttemptEnd, JobId, JobSpec, Scheduler, Topology};
use gangway_plugin_sdk::{Fairness, Reclaim};
use gangway_plugin_sdk::{FairnessDecision, FairnessPolicy, FairnessView};
use gangway_replay::trace::Trace;
use gangway_replay::workload;

const JOBS: usize = 3_000;

/// A broken fairness policy: it forgets every job, which the core refuses.
#[derive(Clone, Copy)]
struct Forgets;

impl FairnessPolicy for Forgets {
    fn order(&self, _: &FairnessView) -> FairnessDecision {
        FairnessDecision::default()
    }
}

fn run() -> Result<String, Box<dyn std::error::Error>> {
    let trace = workload::generate(JOBS, 7);
    let mut sched = Scheduler::with_policies(Topology::uniform(8, 8, 8)?, PolicySet::fallbacks());
    let fairness = sched.policies().slot::<Fairness>().handle();
    let reclaim = sched.policies().slot::<Reclaim>().handle();

    // The operator's thread: told the round number after each round, it
    // stages swaps on a schedule and answers when done (so the run is
    // deterministic; a real operator stages whenever it likes).
    let (tick, ticks) = mpsc::sync_channel::<u64>(0);
    let (done, dones) = mpsc::sync_channel::<()>(0);
    let operator = std::thread::spawn(move || operate(&fairness, &reclaim, &ticks, &done));

    let mut log = String::new();
    let (starts, rounds) = serve(&mut sched, &trace, &mut log, |round| {
        tick.send(round)?;
        dones.recv()?;
        Ok(())
    })?;
    drop(tick);
    operator
        .join()
        .map_err(|_| "the operator thread panicked")??;

    let status = sched.policies().slot::<Fairness>().status();
    log.push_str(&format!(
        "{JOBS} jobs, {starts} starts in {rounds} rounds; fairness now {}, {} swaps, quarantined {:?}\n",
        status.active,
        status.swaps,
        status.quarantined()
    ));
    for event in &status.events {
        log.push_str(&format!("  {event:?}\n"));
    }
    let finished = sched
        .jobs()
        .values()
        .filter(|j| j.final_status().is_some())
        .count();
    log.push_str(&format!(
        "{finished} of {} jobs finished\n",
        sched.jobs().len()
    ));
    Ok(log)
}

/// The operator: after each round (its number from `ticks`), stages what
/// the schedule says through the slots' handles, then answers on `done`.
fn operate(
    fairness: &SlotHandle<Fairness>,
    reclaim: &SlotHandle<Reclaim>,
    ticks: &mpsc::Receiver<u64>,
    done: &mpsc::SyncSender<()>,
) -> Result<(), String> {
    let engine = PolicyEngine::new(SandboxConfig::default()).map_err(|e| e.to_string())?;
    let load = |name: &str| {
        let bytes = gangway_plugin_artifacts::module(name).ok_or(format!("no {name}"))?;
        engine
            .load(&format!("{name}.wasm"), bytes)
            .map_err(|e| e.to_string())
    };
    let las = load("las")?;
    let vc_quota = load("vc-quota")?;
    while let Ok(round) = ticks.recv() {
        match round {
            100 => {
                fairness.stage(las.backend::<Fairness>(b"").map_err(|e| e.to_string())?);
                reclaim.stage(las.backend::<Reclaim>(b"").map_err(|e| e.to_string())?);
            }
            300 => fairness.stage(
                vc_quota
                    .backend::<Fairness>(b"")
                    .map_err(|e| e.to_string())?,
            ),
            500 => fairness.stage(Box::new(Native::new("forgets", Forgets))),
            700 => {
                fairness.rollback();
                reclaim.rollback();
            }
            _ => {}
        }
        done.send(()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Serves `trace` with `sched` until every job has ended: rounds every
/// 60 s of simulated time, arrivals and attempt ends in between, the
/// invariants checked and `after_round` told the round's number after
/// each round. Preemptions go to `log`; the starts and rounds counted.
fn serve(
    sched: &mut Scheduler,
    trace: &Trace,
    log: &mut String,
    mut after_round: impl FnMut(u64) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(usize, u64), Box<dyn std::error::Error>> {
    // Each running attempt's end: (job, attempt number) by time.
    let mut ends: BTreeMap<u64, Vec<(JobId, u32)>> = BTreeMap::new();
    let mut next = 0;
    let mut rounds = 0u64;
    let mut starts = 0usize;
    let mut now = 0;
    let vcs: Vec<_> = trace
        .jobs
        .iter()
        .map(|j| sched.virtual_cluster(&j.vc))
        .collect();
    while next < trace.jobs.len() || !ends.is_empty() || sched.pending_len() > 0 {
        now += 60;
        while let Some(job) = trace.jobs.get(next).filter(|j| j.submit_s <= now) {
            let spec = JobSpec {
                id: JobId(next as u64),
                vc: vcs[next],
                user: 0,
                gpus: job.gpus.min(64),
                submitted_s: now,
            };
            sched.submit(spec)?;
            next += 1;
        }
        end_due(sched, &mut ends, now)?;
        let round = sched.round(now)?;
        rounds += 1;
        for start in &round.starts {
            starts += 1;
            let run_s = trace.jobs[start.job.0 as usize].attempts[0]
                .run_s
                .clamp(60, 6 * 3600);
            let attempt = sched.job(start.job).map_or(0, |j| j.attempts);
            ends.entry(now + run_s)
                .or_default()
                .push((start.job, attempt));
        }
        for p in &round.preempted {
            log.push_str(&format!("round {rounds}: {} preempted\n", p.job));
        }
        sched.check_invariants()?;
        after_round(rounds)?;
    }
    Ok((starts, rounds))
}

/// Ends the attempts due by `now` as passed.
fn end_due(
    sched: &mut Scheduler,
    ends: &mut BTreeMap<u64, Vec<(JobId, u32)>>,
    now: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let due: Vec<u64> = ends.range(..=now).map(|(t, _)| *t).collect();
    for t in due {
        for (id, attempt) in ends.remove(&t).unwrap_or_default() {
            // Unless LAS preempted this attempt (the job then runs again
            // later, as a new attempt with its own end).
            if sched
                .job(id)
                .is_some_and(|j| j.is_running() && j.attempts == attempt)
            {
                sched.end_attempt(id, now, AttemptEnd::Passed)?;
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    print!("{}", run()?);
    Ok(())
}

#[test]
fn swaps_under_load_lose_no_job() {
    let log = run().unwrap();
    assert!(log.contains("quarantined [\"forgets\"]"), "{log}");
    assert!(
        log.contains(&format!("{JOBS} of {JOBS} jobs finished")),
        "{log}"
    );
}
