//! Embed the scheduler in a host: a cluster from a Philly-style machine
//! list, two virtual clusters with quotas, a stream of gangs, and the host's
//! loop: run a round when something changed, launch what it starts, report
//! how attempts end, answer "why is my job pending?".
//!
//! `cargo run -p gangway-embed --example embed_scheduler`
//! (also run by `cargo test`).

use std::collections::BTreeMap;

use gangway_core::policy::{Native, PolicySet};
use gangway_core::{
    AttemptEnd, JobId, JobSpec, RackGrouping, Scheduler, Topology, VcId, WaitReason,
};
use gangway_plugin_sdk::{Configure, Fairness};
use gangway_policy_vc_quota::VcQuota;

const MACHINES: &str = "machineId,number of GPUs,single GPU mem
m1,8,24GB
m2,8,24GB
m3,8,24GB
m4,8,24GB
m5,4,12GB
m6,4,12GB
";

/// A job to submit: (submit time, VC, GPUs, run time).
type Submission = (u64, VcId, u32, u64);

fn run() -> Result<String, Box<dyn std::error::Error>> {
    let mut log = String::new();
    // Racks of servers with the same GPU count, two per rack.
    let topology = Topology::from_machine_list_str(
        "machines.csv",
        MACHINES,
        RackGrouping::SameGpuCount {
            servers_per_rack: 2,
        },
    )?;
    // Philly's fairness (VC quotas, lending idle GPUs), natively; the other
    // slots keep the built-in policies.
    let policies = PolicySet::fallbacks().with::<Fairness>(Box::new(Native::new(
        "vc-quota",
        VcQuota::from_config(b"")?,
    )));
    let mut sched = Scheduler::with_policies(topology, policies);
    let vision = sched.virtual_cluster("vision");
    let speech = sched.virtual_cluster("speech");
    sched.set_quota(vision, Some(24));
    sched.set_quota(speech, Some(16));

    // Ids in this order.
    let jobs: [Submission; 6] = [
        (0, vision, 16, 3_000),
        (10, speech, 8, 1_200),
        (20, vision, 8, 600),
        (30, speech, 4, 900),
        (40, vision, 32, 2_400),
        (50, speech, 1, 300),
    ];
    let now = serve(&mut sched, &jobs, &mut log)?;
    for i in 0..jobs.len() as u64 {
        let job = sched.job(JobId(i)).ok_or("a job was lost")?;
        let waits: Vec<String> = WaitReason::ALL
            .iter()
            .filter(|r| job.wait.get(**r) > 0)
            .map(|r| format!("{r:?} {} s", job.wait.get(*r)))
            .collect();
        log.push_str(&format!(
            "{}: first start at {:?} s, waited [{}]\n",
            job.spec.id,
            job.first_start_s,
            waits.join(", ")
        ));
    }
    log.push_str(&format!("all done at t={now}\n"));
    Ok(log)
}

/// The host's loop over `jobs` until all have ended: at each event (an
/// arrival or an end) it tells the scheduler, runs a round, launches what
/// the round starts and logs why the others wait. Returns the last event's
/// time.
fn serve(
    sched: &mut Scheduler,
    jobs: &[Submission],
    log: &mut String,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut ends: BTreeMap<u64, Vec<JobId>> = BTreeMap::new();
    let mut next = 0;
    let mut now = 0;
    while next < jobs.len() || !ends.is_empty() {
        // The next event: an arrival or an end.
        let arrival = jobs.get(next).map(|j| j.0);
        let end = ends.keys().next().copied();
        now = match (arrival, end) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => break,
        };
        while let Some(&(t, vc, gpus, _)) = jobs.get(next).filter(|j| j.0 == now) {
            let id = JobId(next as u64);
            sched.submit(JobSpec {
                id,
                vc,
                user: 0,
                gpus,
                submitted_s: t,
            })?;
            next += 1;
        }
        for id in ends.remove(&now).unwrap_or_default() {
            sched.end_attempt(id, now, AttemptEnd::Passed)?;
        }
        let round = sched.round(now)?;
        for start in &round.starts {
            let servers: Vec<&str> = start
                .choice
                .placement
                .parts
                .iter()
                .filter_map(|p| sched.topology().server(p.server).map(|s| s.name.as_str()))
                .collect();
            log.push_str(&format!("t={now}: start {} on {servers:?}\n", start.job));
            let run_s = jobs[start.job.0 as usize].3;
            ends.entry(now + run_s).or_default().push(start.job);
        }
        for (job, reason) in &round.waiting {
            log.push_str(&format!("t={now}: {job} waits ({reason:?})\n"));
        }
        sched.check_invariants()?;
    }
    Ok(now)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    print!("{}", run()?);
    Ok(())
}

#[test]
fn every_job_runs_and_the_big_gang_waited() {
    let log = run().unwrap();
    assert_eq!(log.matches(": start ").count(), 6, "{log}");
    // The 32-GPU gang needs the whole 8-GPU rack pair: it waited.
    assert!(log.contains("job 4 waits"), "{log}");
}
