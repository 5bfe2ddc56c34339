//! Shared by the restore and reconcile property tests: random topologies,
//! random event sequences, and a runner that applies them.
#![allow(dead_code, clippy::unwrap_used)]

use gangway_core::policy::{Native, PolicySet};
use gangway_core::{AttemptEnd, JobSpec, RoundReport, Scheduler, ServerId, TopologyBuilder};
use gangway_plugin_sdk::{Configure, JobId};
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

/// Policy sets: 0 the core's defaults; 1 VC quotas with lending, delay
/// scheduling and reservations at once (sticky reservation scopes and wait
/// times matter); 2 least attained service, greedy, FIFO blocking.
pub(crate) fn policies(which: u8) -> PolicySet {
    match which {
        1 => PolicySet {
            fairness: Box::new(Native::new(
                "vc-quota",
                gangway_policy_vc_quota::VcQuota::from_config(b"").unwrap(),
            )),
            locality: Box::new(Native::new(
                "delay",
                gangway_policy_delay::Delay::from_config(b"widen_after_s = [60, 600]").unwrap(),
            )),
            gang: Box::new(Native::new(
                "reserve",
                gangway_policy_reserve::Reserve::from_config(b"after_s = 0").unwrap(),
            )),
        },
        2 => PolicySet {
            fairness: Box::new(Native::new(
                "las",
                gangway_policy_las::Las::from_config(b"").unwrap(),
            )),
            locality: Box::new(Native::new(
                "greedy",
                gangway_policy_greedy::Greedy::from_config(b"").unwrap(),
            )),
            gang: Box::new(Native::new(
                "fifo-block",
                gangway_policy_fifo_block::FifoBlock::from_config(b"").unwrap(),
            )),
        },
        _ => PolicySet::defaults(),
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
