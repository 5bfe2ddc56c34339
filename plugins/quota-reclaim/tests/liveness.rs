//! Liveness under `reserve` plus `quota-reclaim`: a large gang whose VC is
//! under its quota eventually starts, even when a VC without a quota has
//! filled the cluster with jobs that never end on their own and keeps
//! submitting more.
//!
//! Without reclaim the gang would wait for ever (the borrowed GPUs are never
//! given back); with it, the newest borrowed jobs are stopped until the
//! gang fits. The scheduler's invariants are checked after every round.

use gangway_core::policy::{BoxedBackend, Native, PolicySet};
use gangway_core::{AttemptEnd, JobId, JobSpec, JobState, Scheduler, Topology};
use gangway_plugin_sdk::Configure;
use gangway_plugin_sdk::{Fairness, Gang, Reclaim};
use gangway_policy_quota_reclaim::QuotaReclaim;
use gangway_policy_reserve::Reserve;
use gangway_policy_vc_quota::VcQuota;
use proptest::prelude::*;

/// The policies the `philly` preset deploys for these slots.
fn policies() -> PolicySet {
    let fairness = VcQuota::from_config(b"").expect("vc-quota defaults");
    let gang = Reserve::from_config(b"").expect("reserve defaults");
    let reclaim = QuotaReclaim::from_config(b"").expect("quota-reclaim defaults");
    PolicySet::fallbacks()
        .with(Box::new(Native::new("vc-quota", fairness)) as BoxedBackend<Fairness>)
        .with(Box::new(Native::new("reserve", gang)) as BoxedBackend<Gang>)
        .with(Box::new(Native::new("quota-reclaim", reclaim)) as BoxedBackend<Reclaim>)
}

/// A borrowing job: its size and how many rounds it runs (`None`: until
/// stopped).
fn borrower() -> impl Strategy<Value = (u32, Option<u64>)> {
    (
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::option::weighted(0.3, 1u64..40),
    )
}

const ROUND_S: u64 = 10;
/// Rounds the gang may take: the reservation's wait (600 s) plus ample
/// slack for reclaim to stop enough borrowed jobs.
const MAX_ROUNDS: u64 = 200;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_large_gang_under_its_quota_eventually_starts(
        racks in 1u32..=3,
        servers in 2u32..=6,
        servers_in_gang in 1u32..=6,
        backlog in prop::collection::vec(borrower(), 64..160),
    ) {
        let topo = Topology::uniform(racks, servers, 8).expect("topology");
        let total = racks * servers * 8;
        let mut sched = Scheduler::with_policies(topo, policies());
        let owner = sched.virtual_cluster("owner");
        let borrower_vc = sched.virtual_cluster("borrower");
        // The owner may use half the cluster; the borrower has no quota and
        // may only run on GPUs others leave idle.
        let quota = (total / 2).max(8);
        sched.set_quota(owner, Some(quota));
        sched.set_quota(borrower_vc, Some(0));
        // The gang fits one rack and the owner's quota.
        let gang_gpus = servers_in_gang.min(servers).min(quota / 8).max(1) * 8;

        // The borrower fills the cluster first.
        let mut runs: Vec<Option<u64>> = Vec::new();
        let mut next = backlog.iter().cycle();
        let mut submit = |sched: &mut Scheduler, runs: &mut Vec<Option<u64>>, at: u64| {
            let (gpus, rounds) = *next.next().expect("cycle");
            let id = JobId(runs.len() as u64 + 1);
            runs.push(rounds);
            sched
                .submit(JobSpec { id, vc: borrower_vc, user: 1, gpus, submitted_s: at })
                .expect("submit");
        };
        while runs.len() < backlog.len() {
            submit(&mut sched, &mut runs, 0);
        }
        let gang = JobId(1_000_000);
        let mut started_at: Option<u64> = None;
        // Attempts that end on their own: (end time, job, start of the attempt).
        let mut ends: Vec<(u64, JobId, u64)> = Vec::new();
        for round in 1..=MAX_ROUNDS {
            let now = round * ROUND_S;
            if round == 20 {
                sched
                    .submit(JobSpec { id: gang, vc: owner, user: 0, gpus: gang_gpus, submitted_s: now })
                    .expect("submit the gang");
            }
            // The borrower keeps asking.
            submit(&mut sched, &mut runs, now);
            // Attempts whose time is up end (unless stopped meanwhile).
            let (due, later): (Vec<_>, Vec<_>) = ends.iter().partition(|(at, _, _)| *at <= now);
            ends = later;
            for (_, id, started) in due {
                let still = matches!(
                    sched.job(id).map(|j| &j.state),
                    Some(JobState::Running { started_s, .. }) if *started_s == started
                );
                if still {
                    sched.end_attempt(id, now, AttemptEnd::Passed).expect("end");
                }
            }
            let report = sched.round(now).expect("round");
            if let Err(v) = sched.check_invariants() {
                prop_assert!(false, "round {round}: {v}");
            }
            for s in &report.starts {
                if s.job == gang {
                    started_at = Some(now);
                } else if let Some(Some(r)) = runs.get(s.job.0 as usize - 1) {
                    ends.push((now + r * ROUND_S, s.job, now));
                }
            }
            if started_at.is_some() {
                break;
            }
        }
        prop_assert!(
            started_at.is_some(),
            "the {gang_gpus}-GPU gang of a VC with quota {quota} never started on {racks}x{servers}x8 GPUs: {:?}",
            sched.why_pending(gang)
        );
    }
}
