//! Shared scheduler fixtures.

use gangway_core::policy::GuardSettings;
use gangway_core::wasm::PolicyModule;
use gangway_core::{AttemptEnd, JobSpec, JobState, RoundReport, Scheduler, Topology};
use gangway_plugin_sdk::{Fairness, JobId};

/// 2 racks x 4 servers x 8 GPUs, two VCs (one with a quota), `jobs` jobs of
/// mixed sizes (ids 1..=jobs) submitted at t = 1..=jobs, then job 0, a gang
/// of all 64 GPUs, which stays pending while smaller jobs keep the cluster
/// busy. `jobs + 1` jobs in all. Views show every pending job (no window),
/// so a guest that declares no queue order and the built-in policy it falls
/// back to see the same jobs.
pub(crate) fn scheduler(jobs: u64) -> Scheduler {
    let mut s = Scheduler::new(Topology::uniform(2, 4, 8).unwrap());
    s.set_view_window(0);
    let a = s.virtual_cluster("a");
    let b = s.virtual_cluster("b");
    s.set_quota(b, Some(24));
    for i in 1..=jobs {
        s.submit(JobSpec {
            id: JobId(i),
            vc: if i % 3 == 0 { b } else { a },
            user: (i % 5) as u32,
            gpus: [1, 2, 4, 8, 16][(i % 5) as usize],
            submitted_s: i,
        })
        .unwrap();
    }
    s.submit(JobSpec {
        id: JobId(0),
        vc: a,
        user: 9,
        gpus: 64,
        submitted_s: jobs + 1,
    })
    .unwrap();
    s
}

/// A fairness view of the [`scheduler`] cluster with no VCs and no jobs:
/// short enough not to trigger the conditional guests.
pub(crate) fn empty_view() -> gangway_plugin_sdk::FairnessView {
    gangway_plugin_sdk::FairnessView {
        now_s: 0,
        cluster: scheduler(0).state().summary(),
        vcs: vec![],
        jobs: vec![],
    }
}

/// Every job is pending, running or finished exactly once, the invariants
/// hold, and the job count is what was submitted.
pub(crate) fn accounted(s: &Scheduler, submitted: usize) {
    s.check_invariants().unwrap();
    assert_eq!(s.jobs().len(), submitted);
    let pending = s
        .jobs()
        .values()
        .filter(|j| matches!(j.state, JobState::Pending { .. }))
        .count();
    assert_eq!(pending, s.pending_len());
}

/// Runs `rounds` rounds 100 s apart starting at `t0`, finishing every running
/// job before each round; returns the reports.
pub(crate) fn run(s: &mut Scheduler, t0: u64, rounds: u64) -> Vec<RoundReport> {
    let mut reports = Vec::new();
    for r in 0..rounds {
        let now = t0 + r * 100;
        let running: Vec<JobId> = s
            .jobs()
            .iter()
            .filter(|(_, j)| matches!(j.state, JobState::Running { .. }))
            .map(|(id, _)| *id)
            .collect();
        for id in running {
            s.end_attempt(id, now, AttemptEnd::Passed).unwrap();
        }
        reports.push(s.round(now).unwrap());
        s.check_invariants().unwrap();
    }
    reports
}

/// A view past the guests' 100-byte trigger (20 VCs, no jobs).
pub(crate) fn past_trigger() -> gangway_plugin_sdk::FairnessView {
    gangway_plugin_sdk::FairnessView {
        now_s: 7,
        cluster: scheduler(0).state().summary(),
        jobs: vec![],
        vcs: (0..20)
            .map(|i| gangway_plugin_sdk::VcUsage {
                id: gangway_plugin_sdk::VcId(i),
                weight: 1,
                ..gangway_plugin_sdk::VcUsage::default()
            })
            .collect(),
    }
}

/// `module` as the fairness policy of a [`scheduler`] of `jobs` jobs (never
/// quarantined, so every round reaches it) and a default twin, both [`run`]
/// for `rounds` rounds from t = 100: the scheduler, its reports and the
/// twin's.
pub(crate) fn beside_default(
    module: &PolicyModule,
    jobs: u64,
    rounds: u64,
) -> (Scheduler, Vec<RoundReport>, Vec<RoundReport>) {
    let mut sched = scheduler(jobs);
    let mut twin = scheduler(jobs);
    sched
        .policies_mut()
        .set_guard(GuardSettings::never_quarantine(2));
    sched.swap::<Fairness>(module.backend::<Fairness>(b"").unwrap());
    let reports = run(&mut sched, 100, rounds);
    let expected = run(&mut twin, 100, rounds);
    (sched, reports, expected)
}

/// The one policy error of round `report`, a fairness one (a guest `name`
/// that fails every round).
pub(crate) fn the_fairness_error<'r>(
    report: &'r RoundReport,
    name: &str,
) -> &'r gangway_core::policy::PolicyError {
    assert_eq!(
        report.policy_errors.len(),
        1,
        "{name}: {:?}",
        report.policy_errors
    );
    let err = &report.policy_errors[0];
    assert_eq!(err.slot, gangway_core::Slot::Fairness, "{name}");
    err
}
