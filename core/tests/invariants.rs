//! Property tests: random topologies, random event sequences and (sometimes
//! hostile) policies; after every step the cluster's invariants must hold and
//! no job may be lost. The same inputs must give the same decisions.
#![allow(clippy::unwrap_used)]

use gangway_core::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicyError, PolicySet};
use gangway_core::{AttemptEnd, JobSpec, RoundReport, Scheduler, ServerId, TopologyBuilder};
use gangway_plugin_sdk::{
    FairnessDecision, GangAction, GangDecision, JobId, Level, LocalityDecision, QueueView, Ranked,
    RoundView,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Submit { gpus: u32, vc: u8 },
    Round { advance: u64 },
    End { pick: usize, outcome: u8 },
    Down { server: usize },
    Up { server: usize },
    Drain { server: usize },
    Kill { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop_oneof![Just(1u32), Just(2), Just(3), Just(4), Just(8), Just(12), Just(16), Just(40)], 0u8..3)
            .prop_map(|(gpus, vc)| Op::Submit { gpus, vc }),
        4 => (0u64..400).prop_map(|advance| Op::Round { advance }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(pick, outcome)| Op::End { pick, outcome }),
        1 => any::<usize>().prop_map(|server| Op::Down { server }),
        1 => any::<usize>().prop_map(|server| Op::Up { server }),
        1 => any::<usize>().prop_map(|server| Op::Drain { server }),
        1 => any::<usize>().prop_map(|pick| Op::Kill { pick }),
    ]
}

/// Topology: racks of servers with mixed GPU counts, sometimes an extra level.
fn topology() -> impl Strategy<Value = (bool, Vec<Vec<u32>>)> {
    (
        any::<bool>(),
        prop::collection::vec(
            prop::collection::vec(prop_oneof![Just(1u32), Just(2), Just(4), Just(8)], 1..5),
            1..4,
        ),
    )
}

fn build(pods: bool, racks: &[Vec<u32>]) -> gangway_core::Topology {
    let mut b = TopologyBuilder::new();
    let root = b.root();
    for (r, servers) in racks.iter().enumerate() {
        let parent = if pods {
            b.add_domain(root, format!("pod{r}")).unwrap()
        } else {
            root
        };
        let rack = b.add_domain(parent, format!("rack{r}")).unwrap();
        for (s, g) in servers.iter().enumerate() {
            b.add_server(rack, format!("r{r}s{s}"), *g).unwrap();
        }
    }
    b.build().unwrap()
}

/// A policy that answers garbage in a seeded, deterministic pattern.
struct Chaos {
    seed: u64,
    calls: u64,
}

impl Chaos {
    fn roll(&mut self) -> u64 {
        self.calls += 1;
        let mut x = self.seed ^ self.calls.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 31;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 29)
    }
}

impl FairnessBackend for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn order(&mut self, view: &RoundView) -> Result<FairnessDecision, PolicyError> {
        let r = self.roll();
        let mut order: Vec<Ranked> = view
            .jobs
            .iter()
            .rev()
            .map(|j| Ranked {
                job: j.id,
                eligible: r & 1 == 0 || j.gpus < 8,
            })
            .collect();
        match r % 5 {
            0 => order.push(Ranked {
                job: JobId(u64::MAX),
                eligible: true,
            }),
            1 => {
                if let Some(first) = order.first().copied() {
                    order.push(first);
                }
            }
            2 => {
                order.pop();
            }
            _ => {}
        }
        Ok(FairnessDecision { order })
    }
}

impl LocalityBackend for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn spread(&mut self, view: &QueueView) -> Result<LocalityDecision, PolicyError> {
        let r = self.roll();
        let mut spread: Vec<Level> = view.jobs.iter().map(|_| Level((r % 5) as u8)).collect();
        if r.is_multiple_of(7) {
            spread.push(Level::ANY);
        }
        Ok(LocalityDecision { spread })
    }
}

impl GangBackend for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn on_blocked(&mut self, view: &QueueView) -> Result<GangDecision, PolicyError> {
        let r = self.roll();
        let actions = [GangAction::Backfill, GangAction::Block, GangAction::Reserve];
        let mut on_blocked: Vec<GangAction> = view
            .jobs
            .iter()
            .enumerate()
            .map(|(i, _)| actions[((r >> (i % 60)) % 3) as usize])
            .collect();
        if r.is_multiple_of(6) {
            on_blocked.clear();
        }
        Ok(GangDecision {
            on_blocked,
            max_reservations: (r % 3) as u32,
        })
    }
}

fn policies(chaos: Option<u64>) -> PolicySet {
    match chaos {
        None => PolicySet::defaults(),
        Some(seed) => PolicySet {
            fairness: Box::new(Chaos { seed, calls: 0 }),
            locality: Box::new(Chaos {
                seed: seed + 1,
                calls: 0,
            }),
            gang: Box::new(Chaos {
                seed: seed + 2,
                calls: 0,
            }),
        },
    }
}

/// Runs the ops, checking invariants after each; returns every round's report.
fn run(
    topo: &(bool, Vec<Vec<u32>>),
    ops: &[Op],
    chaos: Option<u64>,
    quota: Option<u32>,
) -> Result<Vec<RoundReport>, TestCaseError> {
    let mut sched = Scheduler::with_policies(build(topo.0, &topo.1), policies(chaos));
    let vcs: Vec<_> = (0..3)
        .map(|i| sched.virtual_cluster(&format!("vc{i}")))
        .collect();
    sched.set_quota(vcs[0], quota);
    let servers = sched.topology().servers().len();
    let mut now = 0u64;
    let mut next_id = 0u64;
    let mut submitted = 0usize;
    let mut reports = Vec::new();
    for op in ops {
        match *op {
            Op::Submit { gpus, vc } => {
                let spec = JobSpec {
                    id: JobId(next_id),
                    vc: vcs[vc as usize],
                    user: 0,
                    gpus,
                    submitted_s: now,
                };
                next_id += 1;
                if sched.submit(spec).is_ok() {
                    submitted += 1;
                } else {
                    prop_assert!(gpus > sched.topology().total_gpus());
                }
            }
            Op::Round { advance } => {
                now += advance;
                let before = sched.pending_len();
                let report = sched.round(now).unwrap();
                prop_assert_eq!(report.starts.len() + report.waiting.len(), before);
                for s in &report.starts {
                    let job = sched.job(s.job).unwrap();
                    prop_assert_eq!(s.choice.placement.gpu_count(), job.spec.gpus);
                }
                reports.push(report);
            }
            Op::End { pick, outcome } => {
                let running: Vec<JobId> = sched
                    .jobs()
                    .values()
                    .filter(|j| j.is_running())
                    .map(|j| j.spec.id)
                    .collect();
                if !running.is_empty() {
                    let end = match outcome {
                        0 => AttemptEnd::Passed,
                        1 => AttemptEnd::Failed { retry: true },
                        2 => AttemptEnd::Failed { retry: false },
                        _ => AttemptEnd::Killed,
                    };
                    sched
                        .end_attempt(running[pick % running.len()], now, end)
                        .unwrap();
                }
            }
            Op::Down { server } => {
                let hit = sched
                    .server_down(ServerId((server % servers) as u32), now)
                    .unwrap();
                for id in hit {
                    prop_assert!(
                        sched.job(id).unwrap().is_pending(),
                        "interrupted job re-queued"
                    );
                }
            }
            Op::Up { server } => sched
                .server_up(ServerId((server % servers) as u32))
                .unwrap(),
            Op::Drain { server } => sched.drain(ServerId((server % servers) as u32)).unwrap(),
            Op::Kill { pick } => {
                let live: Vec<JobId> = sched
                    .jobs()
                    .values()
                    .filter(|j| j.final_status().is_none())
                    .map(|j| j.spec.id)
                    .collect();
                if !live.is_empty() {
                    sched.kill(live[pick % live.len()], now).unwrap();
                }
            }
        }
        if let Err(e) = sched.check_invariants() {
            return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
        }
        prop_assert_eq!(sched.jobs().len(), submitted, "no job lost");
    }
    Ok(reports)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn default_policies_keep_invariants(
        topo in topology(),
        ops in prop::collection::vec(op(), 1..120),
        quota in prop::option::of(0u32..24),
    ) {
        let a = run(&topo, &ops, None, quota)?;
        let b = run(&topo, &ops, None, quota)?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }

    #[test]
    fn hostile_policies_cannot_break_invariants(
        topo in topology(),
        ops in prop::collection::vec(op(), 1..120),
        seed in any::<u64>(),
    ) {
        let a = run(&topo, &ops, Some(seed), Some(8))?;
        let b = run(&topo, &ops, Some(seed), Some(8))?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }
}

/// The hostile policies really do answer garbage, so the property above
/// exercises the fallback path, not just well-behaved answers.
#[test]
fn chaos_policies_trigger_fallbacks() {
    let topo = (false, vec![vec![8, 4], vec![2, 8]]);
    let mut ops = Vec::new();
    for i in 0..40 {
        ops.push(Op::Submit {
            gpus: [1, 2, 4, 8, 16][i % 5],
            vc: (i % 3) as u8,
        });
        ops.push(Op::Round { advance: 30 });
        if i % 4 == 0 {
            ops.push(Op::End {
                pick: i,
                outcome: (i % 4) as u8,
            });
        }
    }
    let reports = run(&topo, &ops, Some(42), Some(8)).unwrap();
    let errors: usize = reports.iter().map(|r| r.policy_errors.len()).sum();
    assert!(errors > 5, "only {errors} policy errors");
    assert!(reports.iter().any(|r| !r.starts.is_empty()));
}
