//! Shared by the restore and reconcile property tests: random topologies,
//! random event sequences, and a runner that applies them.
#![allow(dead_code, clippy::unwrap_used)]

use gangway_core::policy::{BoxedBackend, Native, PolicySet};
use gangway_core::{AttemptEnd, JobSpec, RoundReport, Scheduler, ServerId, TopologyBuilder};
use gangway_plugin_sdk::SlotContract;
use gangway_plugin_sdk::{Configure, FailureClass, JobId, Policy};
use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};
use proptest::prelude::*;

/// One event a host reports, or a round.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Submit { gpus: u32, vc: u8 },
    Round { advance: u64 },
    End { pick: usize, outcome: u8 },
    Down { server: usize },
    Up { server: usize },
    Drain { server: usize },
    Kill { pick: usize },
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop_oneof![Just(1u32), Just(2), Just(3), Just(4), Just(8), Just(12), Just(16)], 0u8..3)
            .prop_map(|(gpus, vc)| Op::Submit { gpus, vc }),
        4 => (0u64..400).prop_map(|advance| Op::Round { advance }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(pick, outcome)| Op::End { pick, outcome }),
        1 => any::<usize>().prop_map(|server| Op::Down { server }),
        1 => any::<usize>().prop_map(|server| Op::Up { server }),
        1 => any::<usize>().prop_map(|server| Op::Drain { server }),
        1 => any::<usize>().prop_map(|pick| Op::Kill { pick }),
    ]
}

/// Racks of servers with mixed GPU counts.
pub(crate) fn topology() -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec(
        prop::collection::vec(prop_oneof![Just(2u32), Just(4), Just(8)], 1..4),
        1..4,
    )
}

pub(crate) fn build(racks: &[Vec<u32>]) -> gangway_core::Topology {
    let mut b = TopologyBuilder::new();
    let root = b.root();
    for (r, servers) in racks.iter().enumerate() {
        let rack = b.add_domain(root, format!("rack{r}")).unwrap();
        for (s, g) in servers.iter().enumerate() {
            b.add_server(rack, format!("r{r}s{s}"), *g).unwrap();
        }
    }
    b.build().unwrap()
}

fn native<S: SlotContract, P: Policy<S> + Configure + Send + 'static>(
    name: &str,
    config: &[u8],
) -> BoxedBackend<S> {
    Box::new(Native::new(name, P::from_config(config).unwrap()))
}

/// Policy sets: 0 the core's built-ins; 1 VC quotas with lending, delay
/// scheduling, reservations, quota reclaim and failure-aware retries with
/// delays and probes, behind a view window of 3 jobs per VC (sticky
/// reservation scopes, wait times, delayed retries and queued jobs matter);
/// 2 least attained service with its preemption, greedy, FIFO blocking,
/// Gandiva migrations and a fixed retry delay.
pub(crate) fn policies(which: u8) -> PolicySet {
    match which {
        1 => PolicySet::fallbacks()
            .with::<Fairness>(native::<_, gangway_policy_vc_quota::VcQuota>(
                "vc-quota", b"",
            ))
            .with::<Locality>(native::<_, gangway_policy_delay::Delay>(
                "delay",
                b"widen_after_s = [60, 600]",
            ))
            .with::<Gang>(native::<_, gangway_policy_reserve::Reserve>(
                "reserve",
                b"after_s = 0",
            ))
            .with::<Reclaim>(native::<_, gangway_policy_quota_reclaim::QuotaReclaim>(
                "quota-reclaim",
                b"",
            ))
            .with::<Retry>(native::<_, gangway_policy_failure_aware::FailureAware>(
                "failure-aware",
                b"infra_after_s = 50\nprobe_s = 40",
            )),
        2 => PolicySet::fallbacks()
            .with::<Fairness>(native::<_, gangway_policy_las::Las>("las", b""))
            .with::<Locality>(native::<_, gangway_policy_greedy::Greedy>("greedy", b""))
            .with::<Gang>(native::<_, gangway_policy_fifo_block::FifoBlock>(
                "fifo-block",
                b"",
            ))
            .with::<Reclaim>(native::<_, gangway_policy_las::LasPreempt>("las", b""))
            .with::<Retry>(native::<_, gangway_policy_fixed::FixedRetry>(
                "fixed",
                b"after_s = 30",
            ))
            .with::<Defragment>(native::<_, gangway_policy_gandiva::Gandiva>("gandiva", b"")),
        _ => PolicySet::fallbacks(),
    }
}

/// The host's side of a run: the clock and the next job id.
#[derive(Clone, Debug, Default)]
pub(crate) struct Host {
    pub(crate) now: u64,
    pub(crate) next_id: u64,
}

/// A scheduler with three VCs, two of them with quotas.
pub(crate) fn scheduler(racks: &[Vec<u32>], which: u8) -> Scheduler {
    let mut sched = Scheduler::with_policies(build(racks), policies(which));
    if which == 1 {
        sched.set_view_window(3);
    }
    let total = sched.topology().total_gpus();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        let vc = sched.virtual_cluster(name);
        if i < 2 {
            sched.set_quota(vc, Some(total / 3 + 1));
        }
    }
    sched
}

/// Applies one op; returns the round's report for rounds. Errors the
/// scheduler gives for impossible events (too large, wrong state) are part of
/// the behaviour and ignored alike on every run.
pub(crate) fn apply(sched: &mut Scheduler, host: &mut Host, op: &Op) -> Option<RoundReport> {
    let servers = sched.topology().servers().len();
    let now = host.now;
    match *op {
        Op::Submit { gpus, vc } => {
            let spec = JobSpec {
                id: JobId(host.next_id),
                vc: gangway_plugin_sdk::VcId(u32::from(vc)),
                user: u32::from(vc),
                gpus,
                submitted_s: now,
            };
            host.next_id += 1;
            let _ = sched.submit(spec);
        }
        Op::Round { advance } => {
            host.now += advance;
            return Some(sched.round(host.now).unwrap());
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
                    1 => AttemptEnd::Failed {
                        class: [
                            FailureClass::Unknown,
                            FailureClass::CudaFailure,
                            FailureClass::SyntaxError,
                        ][pick % 3],
                        last: false,
                    },
                    2 => AttemptEnd::Failed {
                        class: FailureClass::Unknown,
                        last: true,
                    },
                    _ => AttemptEnd::Killed,
                };
                sched
                    .end_attempt(running[pick % running.len()], now, end)
                    .unwrap();
            }
        }
        Op::Down { server } => {
            sched
                .server_down(ServerId((server % servers) as u32), now)
                .unwrap();
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
    None
}
