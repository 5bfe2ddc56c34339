//! Whole-scheduler scenarios: a policy in its slot of a real
//! [`crate::Scheduler`], driven by generated arrivals, attempt ends,
//! failures and retries. A conforming policy never makes a round fall back,
//! and whatever it answers the core keeps its invariants.

use std::collections::{BTreeMap, BTreeSet};

use gangway_plugin_sdk::{FailureClass, JobId};

use super::finding::{Finding, FindingKind};
use gangway_plugin_sdk::testing::SlotViews;

use super::Options;
use crate::policy::{BoxedBackend, PolicySet};
use crate::{AttemptEnd, JobSpec, JobState, Scheduler, TopologyBuilder};
use gangway_plugin_sdk::SlotContract;

/// One generated scenario: a cluster, virtual clusters with quotas, jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// GPUs of each server, rack by rack.
    pub racks: Vec<Vec<u32>>,
    /// Quota of each virtual cluster (`None`: unlimited).
    pub quotas: Vec<Option<u32>>,
    /// The jobs, by submit time.
    pub jobs: Vec<ScenarioJob>,
}

/// One job of a [`Scenario`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScenarioJob {
    /// Submit time.
    pub submit_s: u64,
    /// Its virtual cluster (an index into [`Scenario::quotas`]).
    pub vc: u32,
    /// GPUs.
    pub gpus: u32,
    /// How long each attempt runs.
    pub run_s: u64,
    /// Attempts that fail before one passes (each failure is retried unless
    /// the retry policy gives up).
    pub failures: u32,
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The scenario of `seed`: 2-4 racks of 2-6 servers of 2, 4 or 8 GPUs, 1-4
/// virtual clusters (some with quotas), 20-120 jobs of 1-32 GPUs arriving
/// over an hour, a fifth of them failing before they pass.
pub fn generate(seed: u64) -> Scenario {
    let mut r = Rng(seed);
    let racks: Vec<Vec<u32>> = (0..2 + r.below(3))
        .map(|_| {
            (0..2 + r.below(5))
                .map(|_| [2, 4, 8, 8][r.below(4) as usize])
                .collect()
        })
        .collect();
    let total: u32 = racks.iter().flatten().sum();
    let quotas = (0..1 + r.below(4))
        .map(|_| (r.below(3) == 0).then(|| (total / 2).max(1)))
        .collect::<Vec<_>>();
    let mut submit = 0;
    let jobs = (0..20 + r.below(100))
        .map(|_| {
            submit += r.below(90);
            ScenarioJob {
                submit_s: submit,
                vc: r.below(quotas.len() as u64) as u32,
                gpus: ([1, 1, 1, 2, 4, 8, 16, 32][r.below(8) as usize] as u32).min(total),
                run_s: 30 + r.below(1_800),
                failures: u32::from(r.below(5) == 0),
            }
        })
        .collect();
    Scenario {
        racks,
        quotas,
        jobs,
    }
}

/// How often scenario rounds run (seconds).
const ROUND_S: u64 = 30;
/// Rounds after the last arrival before the scenario ends.
const TAIL_ROUNDS: u64 = 2_000;

/// Runs `options.scenarios` scenarios with the policy in slot `S`; returns
/// how many ran and their rounds.
pub(crate) fn run<S: SlotContract + SlotViews>(
    name: &str,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
    options: &Options,
) -> Result<(usize, usize), Finding> {
    let mut rounds = 0;
    for k in 0..options.scenarios {
        let scenario = generate(options.seed ^ u64::from(k).wrapping_mul(0x5851_f42d_4c95_7f2d));
        rounds +=
            one::<S>(name, factory()?, &scenario, options.liveness).map_err(|kind| Finding {
                kind,
                ..Finding::config(S::SLOT, name, "")
            })?;
    }
    Ok((options.scenarios as usize, rounds))
}

fn fail(scenario: &Scenario, t: u64, what: String) -> FindingKind {
    FindingKind::Scenario(format!(
        "at {t} s of a scenario of {} racks {:?}, {} jobs: {what}",
        scenario.racks.len(),
        scenario.racks,
        scenario.jobs.len()
    ))
}

/// Runs one scenario; returns its rounds.
pub(crate) fn one<S: SlotContract>(
    name: &str,
    backend: BoxedBackend<S>,
    scenario: &Scenario,
    liveness: bool,
) -> Result<usize, FindingKind> {
    let mut b = TopologyBuilder::new();
    let root = b.root();
    for (i, rack) in scenario.racks.iter().enumerate() {
        let domain = b
            .add_domain(root, format!("rack{i}"))
            .map_err(|e| fail(scenario, 0, e.to_string()))?;
        for (j, g) in rack.iter().enumerate() {
            b.add_server(domain, format!("r{i}s{j}"), *g)
                .map_err(|e| fail(scenario, 0, e.to_string()))?;
        }
    }
    let topo = b.build().map_err(|e| fail(scenario, 0, e.to_string()))?;
    let mut sched = Scheduler::with_policies(topo, PolicySet::fallbacks().with::<S>(backend));
    let vcs: Vec<_> = scenario
        .quotas
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let vc = sched.virtual_cluster(&format!("vc{i}"));
            sched.set_quota(vc, *q);
            vc
        })
        .collect();
    // When each running job's attempt ends, and how.
    let mut ends: BTreeMap<JobId, u64> = BTreeMap::new();
    let mut failures_left: Vec<u32> = scenario.jobs.iter().map(|j| j.failures).collect();
    let mut next = 0usize;
    let mut t = 0u64;
    let mut rounds = 0usize;
    let last_arrival = scenario.jobs.last().map_or(0, |j| j.submit_s);
    let total = sched.topology().total_gpus();
    loop {
        while let Some(j) = scenario.jobs.get(next).filter(|j| j.submit_s <= t) {
            let spec = JobSpec {
                id: JobId(next as u64),
                vc: vcs[j.vc as usize % vcs.len()],
                user: 0,
                gpus: j.gpus,
                submitted_s: j.submit_s,
            };
            sched
                .submit(spec)
                .map_err(|e| fail(scenario, t, e.to_string()))?;
            next += 1;
        }
        let due: Vec<JobId> = ends
            .iter()
            .filter(|(_, end)| **end <= t)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            ends.remove(&id);
            let i = id.0 as usize;
            let end = if failures_left[i] > 0 {
                failures_left[i] -= 1;
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last: false,
                }
            } else {
                AttemptEnd::Passed
            };
            sched
                .end_attempt(id, t, end)
                .map_err(|e| fail(scenario, t, e.to_string()))?;
        }
        let report = sched
            .round(t)
            .map_err(|e| fail(scenario, t, e.to_string()))?;
        rounds += 1;
        if let Some(e) = report.policy_errors.iter().find(|e| e.slot == S::SLOT) {
            return Err(fail(
                scenario,
                t,
                format!("the round fell back on the built-in policy: {e}"),
            ));
        }
        for p in &report.preempted {
            ends.remove(&p.job);
        }
        for s in &report.starts {
            let job = sched
                .job(s.job)
                .ok_or_else(|| fail(scenario, t, format!("{} started but is unknown", s.job)))?;
            if s.choice.placement.gpu_count() != job.next_gpus() {
                return Err(fail(
                    scenario,
                    t,
                    format!(
                        "{} started on {} GPUs, needs {}",
                        s.job,
                        s.choice.placement.gpu_count(),
                        job.next_gpus()
                    ),
                ));
            }
            let run = match s.probe_s {
                Some(p) => p.min(scenario.jobs[s.job.0 as usize].run_s),
                None => scenario.jobs[s.job.0 as usize].run_s,
            };
            ends.insert(s.job, t + run);
        }
        sched
            .check_invariants()
            .map_err(|e| fail(scenario, t, e.to_string()))?;
        if sched.jobs().len() != next {
            return Err(fail(scenario, t, "a job was lost".into()));
        }
        let idle = ends.is_empty() && sched.pending_len() == 0 && sched.retrying_len() == 0;
        if next >= scenario.jobs.len() && (idle || t > last_arrival + TAIL_ROUNDS * ROUND_S) {
            break;
        }
        t += ROUND_S;
    }
    if liveness {
        let never: BTreeSet<JobId> = sched
            .jobs()
            .iter()
            .filter(|(_, j)| j.first_start_s.is_none() && j.spec.gpus <= total)
            .filter(|(_, j)| matches!(j.state, JobState::Pending { .. }))
            .map(|(id, _)| *id)
            .collect();
        if let Some(id) = never.first() {
            return Err(FindingKind::Liveness(format!(
                "{id} ({} GPUs) never started in {rounds} rounds, {} of them after the last \
                 arrival, on a cluster of {total} GPUs ({name})",
                sched.job(*id).map_or(0, |j| j.spec.gpus),
                (t.saturating_sub(last_arrival)) / ROUND_S
            )));
        }
    }
    Ok(rounds)
}
