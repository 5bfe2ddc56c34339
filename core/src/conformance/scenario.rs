//! Whole-scheduler scenarios: a policy in its slot of a real
//! [`crate::Scheduler`], driven by generated arrivals, attempt ends,
//! failures and retries. A conforming policy never makes a round fall back,
//! and whatever it answers the core keeps its invariants.

use std::collections::{BTreeMap, BTreeSet};

use gangway_plugin_sdk::{FailureClass, JobId};

use super::finding::{Finding, FindingKind};
use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::testing::rng::Rng;

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
    let mut drive = Drive::<S>::new(backend, scenario)?;
    let last_arrival = scenario.jobs.last().map_or(0, |j| j.submit_s);
    loop {
        drive.arrive()?;
        drive.end_due()?;
        let idle = drive.round()?;
        if drive.next >= scenario.jobs.len()
            && (idle || drive.t > last_arrival + TAIL_ROUNDS * ROUND_S)
        {
            break;
        }
        drive.t += ROUND_S;
    }
    if liveness {
        drive.liveness(name, last_arrival)?;
    }
    Ok(drive.rounds)
}

/// A scenario being driven: the scheduler, its clock and what is due.
struct Drive<'a, S> {
    scenario: &'a Scenario,
    sched: Scheduler,
    vcs: Vec<crate::VcId>,
    /// When each running job's attempt ends.
    ends: BTreeMap<JobId, u64>,
    /// Failures each job has still to go through before it passes.
    failures_left: Vec<u32>,
    /// The next job to arrive.
    next: usize,
    t: u64,
    rounds: usize,
    _slot: std::marker::PhantomData<S>,
}

impl<'a, S: SlotContract> Drive<'a, S> {
    /// The scenario's cluster and virtual clusters, the policy in its slot.
    fn new(backend: BoxedBackend<S>, scenario: &'a Scenario) -> Result<Self, FindingKind> {
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
        let vcs = scenario
            .quotas
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let vc = sched.virtual_cluster(&format!("vc{i}"));
                sched.set_quota(vc, *q);
                vc
            })
            .collect();
        Ok(Drive {
            scenario,
            sched,
            vcs,
            ends: BTreeMap::new(),
            failures_left: scenario.jobs.iter().map(|j| j.failures).collect(),
            next: 0,
            t: 0,
            rounds: 0,
            _slot: std::marker::PhantomData,
        })
    }

    fn fail(&self, what: String) -> FindingKind {
        fail(self.scenario, self.t, what)
    }

    /// Submits the jobs that have arrived by now.
    fn arrive(&mut self) -> Result<(), FindingKind> {
        while let Some(j) = self
            .scenario
            .jobs
            .get(self.next)
            .filter(|j| j.submit_s <= self.t)
        {
            let spec = JobSpec {
                id: JobId(self.next as u64),
                vc: self.vcs[j.vc as usize % self.vcs.len()],
                user: 0,
                gpus: j.gpus,
                submitted_s: j.submit_s,
            };
            self.sched
                .submit(spec)
                .map_err(|e| self.fail(e.to_string()))?;
            self.next += 1;
        }
        Ok(())
    }

    /// Ends the attempts due by now: failed while the job has failures
    /// left, passed after.
    fn end_due(&mut self) -> Result<(), FindingKind> {
        let due: Vec<JobId> = self
            .ends
            .iter()
            .filter(|(_, end)| **end <= self.t)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.ends.remove(&id);
            let left = &mut self.failures_left[id.0 as usize];
            let end = if *left > 0 {
                *left -= 1;
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last: false,
                }
            } else {
                AttemptEnd::Passed
            };
            self.sched
                .end_attempt(id, self.t, end)
                .map_err(|e| self.fail(e.to_string()))?;
        }
        Ok(())
    }

    /// Runs a round and checks it: no fallback for the slot, every start
    /// whole, the invariants, no job lost. Returns whether nothing runs or
    /// waits any more.
    fn round(&mut self) -> Result<bool, FindingKind> {
        let report = self
            .sched
            .round(self.t)
            .map_err(|e| self.fail(e.to_string()))?;
        self.rounds += 1;
        if let Some(e) = report.policy_errors.iter().find(|e| e.slot == S::SLOT) {
            return Err(self.fail(format!("the round fell back on the built-in policy: {e}")));
        }
        for p in &report.preempted {
            self.ends.remove(&p.job);
        }
        for s in &report.starts {
            let job = self
                .sched
                .job(s.job)
                .ok_or_else(|| self.fail(format!("{} started but is unknown", s.job)))?;
            let (got, needs) = (s.choice.placement.gpu_count(), job.next_gpus());
            if got != needs {
                return Err(self.fail(format!("{} started on {got} GPUs, needs {needs}", s.job)));
            }
            let run_s = self.scenario.jobs[s.job.0 as usize].run_s;
            let run = s.probe_s.map_or(run_s, |p| p.min(run_s));
            self.ends.insert(s.job, self.t + run);
        }
        self.sched
            .check_invariants()
            .map_err(|e| self.fail(e.to_string()))?;
        if self.sched.jobs().len() != self.next {
            return Err(self.fail("a job was lost".into()));
        }
        Ok(self.ends.is_empty() && self.sched.pending_len() == 0 && self.sched.retrying_len() == 0)
    }

    /// Fails if a job that fits the cluster never started.
    fn liveness(&self, name: &str, last_arrival: u64) -> Result<(), FindingKind> {
        let total = self.sched.topology().total_gpus();
        let never: BTreeSet<JobId> = self
            .sched
            .jobs()
            .iter()
            .filter(|(_, j)| j.first_start_s.is_none() && j.spec.gpus <= total)
            .filter(|(_, j)| matches!(j.state, JobState::Pending { .. }))
            .map(|(id, _)| *id)
            .collect();
        match never.first() {
            Some(id) => Err(FindingKind::Liveness(format!(
                "{id} ({} GPUs) never started in {} rounds, {} of them after the last \
                 arrival, on a cluster of {total} GPUs ({name})",
                self.sched.job(*id).map_or(0, |j| j.spec.gpus),
                self.rounds,
                (self.t.saturating_sub(last_arrival)) / ROUND_S
            ))),
            None => Ok(()),
        }
    }
}
