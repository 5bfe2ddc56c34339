//! Reconciliation with an engine's truth: whatever the scheduler believed
//! and whatever the engine says (jobs kept, lost, moved, foreign jobs, GPUs
//! claimed twice, servers down, draining or unknown), reconcile brings the
//! scheduler in line, keeps its invariants, loses no job, reports every
//! difference, and a second reconcile with the same truth changes nothing.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::reconcile::{Difference, EngineTruth};
use gangway_core::{Health, Placement, ServerGpus, ServerId};
use gangway_plugin_sdk::{JobId, VcId};
use proptest::prelude::*;
use support::{Host, apply, op, scheduler, topology};

/// What the engine does with each job the scheduler has running.
#[derive(Clone, Debug)]
enum Fate {
    Keep,
    Lose,
    Move { server: usize, mask: u64 },
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        4 => Just(Fate::Keep),
        1 => Just(Fate::Lose),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(server, mask)| Fate::Move { server, mask }),
    ]
}

fn placement(
    servers: usize,
    gpus_of: impl Fn(usize) -> u32,
    server: usize,
    mask: u64,
) -> Placement {
    let s = server % (servers + 1); // sometimes a server that does not exist
    let gpus = if s < servers { gpus_of(s) } else { 8 };
    let full = (1u64 << gpus) - 1;
    let m = (mask & full).max(1);
    Placement {
        parts: vec![ServerGpus {
            server: ServerId(s as u32),
            gpus: m,
        }],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn reconcile_brings_the_scheduler_in_line(
        racks in topology(),
        ops in prop::collection::vec(op(), 0..80),
        fates in prop::collection::vec(fate(), 64),
        foreign in prop::collection::vec((any::<usize>(), any::<u64>()), 0..4),
        health in prop::collection::vec((any::<usize>(), 0u8..3), 0..4),
        adopt in any::<bool>(),
    ) {
        let mut sched = scheduler(&racks, 0);
        let foreign_vc: VcId = sched.virtual_cluster("(foreign)");
        let mut host = Host::default();
        for op in &ops {
            apply(&mut sched, &mut host, op);
        }
        let servers = sched.topology().servers().len();
        let gpus_of = |s: usize| sched.topology().servers()[s].gpus;

        let mut truth = EngineTruth::default();
        let running: Vec<(JobId, Placement)> = sched
            .state()
            .allocations()
            .iter()
            .map(|(j, p)| (*j, p.clone()))
            .collect();
        for (i, (job, p)) in running.iter().enumerate() {
            match &fates[i % fates.len()] {
                Fate::Keep => {
                    truth.running.insert(*job, p.clone());
                }
                Fate::Lose => {}
                Fate::Move { server, mask } => {
                    truth.running.insert(*job, placement(servers, gpus_of, *server, *mask));
                }
            }
        }
        for (k, (server, mask)) in foreign.iter().enumerate() {
            let p = placement(servers, gpus_of, *server, *mask);
            truth.running.insert(JobId(1_000_000 + k as u64), p);
        }
        for (server, h) in &health {
            let h = [Health::Up, Health::Draining, Health::Down][*h as usize];
            truth.health.insert(ServerId((*server % (servers + 1)) as u32), h);
        }

        let jobs_before: BTreeSet<JobId> = sched.jobs().keys().copied().collect();
        let now = host.now + 5;
        let diffs = sched.reconcile(&truth, adopt.then_some(foreign_vc), now);
        sched.check_invariants().map_err(|e| TestCaseError::fail(format!("{e}; {diffs:?}")))?;

        let unresolved: BTreeSet<JobId> = diffs
            .iter()
            .filter_map(|d| match d {
                Difference::Unresolved { job, .. } => Some(*job),
                _ => None,
            })
            .collect();
        // No job lost; foreign jobs added only when adopted.
        for id in &jobs_before {
            prop_assert!(sched.job(*id).is_some(), "{id} lost");
        }
        // Every resolved engine job holds exactly its GPUs; nothing else runs.
        let mut expected: BTreeMap<JobId, Placement> = BTreeMap::new();
        for (id, p) in &truth.running {
            if unresolved.contains(id) {
                prop_assert!(sched.state().allocation(*id).is_none());
                continue;
            }
            let mut p = p.clone();
            p.parts.sort_by_key(|x| x.server);
            expected.insert(*id, p);
        }
        prop_assert_eq!(sched.state().allocations(), &expected);
        for (server, h) in &truth.health {
            if (server.0 as usize) < servers {
                prop_assert_eq!(sched.state().health(*server), Some(*h));
            }
        }

        // Idempotent: a second pass only repeats what it could not resolve.
        let again = sched.reconcile(&truth, adopt.then_some(foreign_vc), now + 1);
        for d in &again {
            prop_assert!(
                matches!(d, Difference::Unresolved { .. } | Difference::UnknownServer { .. }),
                "second pass changed something: {:?}", d
            );
        }
        let again_unresolved: BTreeSet<JobId> = again
            .iter()
            .filter_map(|d| match d {
                Difference::Unresolved { job, .. } => Some(*job),
                _ => None,
            })
            .collect();
        prop_assert_eq!(again_unresolved, unresolved);
        sched.check_invariants().unwrap();
    }
}

/// A server the engine takes down interrupts the gang spanning it whole; an
/// engine that ran a pending job (the host crashed after launching it) makes
/// it running; a foreign job that leaves frees its GPUs.
#[test]
fn typical_differences_after_a_host_restart() {
    let racks = vec![vec![8, 8]];
    let mut sched = scheduler(&racks, 0);
    let foreign = sched.virtual_cluster("(foreign)");
    let mut host = Host::default();
    for op in [
        support::Op::Submit { gpus: 12, vc: 2 },
        support::Op::Round { advance: 1 },
        support::Op::Submit { gpus: 2, vc: 2 },
    ] {
        apply(&mut sched, &mut host, &op);
    }
    let gang = sched.state().allocation(JobId(0)).unwrap().clone();
    assert_eq!(gang.parts.len(), 2);
    // The engine runs the pending job 1 on server 1 GPUs 6-7 and a foreign
    // job on server 1 GPU 5; server 0 is down, so the gang is gone.
    let mut truth = EngineTruth::default();
    let part = |s: u32, m: u64| Placement {
        parts: vec![ServerGpus {
            server: ServerId(s),
            gpus: m,
        }],
    };
    truth.running.insert(JobId(1), part(1, 0xc0));
    truth.running.insert(JobId(77), part(1, 0x20));
    truth.health.insert(ServerId(0), Health::Down);
    let diffs = sched.reconcile(&truth, Some(foreign), 10);
    assert_eq!(
        diffs,
        vec![
            Difference::NotRunning { job: JobId(0) },
            Difference::Health {
                server: ServerId(0),
                was: Health::Up,
                now: Health::Down,
                interrupted: vec![],
            },
            Difference::Started {
                job: JobId(1),
                placement: part(1, 0xc0)
            },
            Difference::Foreign {
                job: JobId(77),
                placement: part(1, 0x20)
            },
        ]
    );
    assert!(sched.job(JobId(0)).unwrap().is_pending());
    assert_eq!(sched.job(JobId(77)).unwrap().spec.vc, foreign);
    sched.check_invariants().unwrap();

    // The foreign job leaves; the GPU it held is free again.
    truth.running.remove(&JobId(77));
    let diffs = sched.reconcile(&truth, Some(foreign), 20);
    assert_eq!(diffs, vec![Difference::ForeignEnded { job: JobId(77) }]);
    assert_eq!(sched.state().free_gpus(), 6);
    assert!(sched.forget(JobId(77)).is_ok());
    sched.check_invariants().unwrap();

    // Two engine jobs on one GPU: the second cannot be adopted.
    truth.running.insert(JobId(78), part(1, 0x80));
    let diffs = sched.reconcile(&truth, Some(foreign), 30);
    assert!(
        matches!(&diffs[..], [Difference::Unresolved { job: JobId(78), why }] if why.contains("not free")),
        "{diffs:?}"
    );
}

/// A member of a running gang ends while the rest runs: the engine shows
/// the gang on part of its GPUs, the scheduler shrinks it to that part,
/// frees the rest at once and counts their GPU time as attained; a part
/// the job never held is not a shrink.
#[test]
fn a_member_that_ended_shrinks_its_gang() {
    let racks = vec![vec![8, 8]];
    let mut sched = scheduler(&racks, 0);
    let mut host = Host::default();
    for op in [
        support::Op::Submit { gpus: 16, vc: 0 },
        support::Op::Round { advance: 1 },
    ] {
        apply(&mut sched, &mut host, &op);
    }
    let gang = sched.state().allocation(JobId(0)).unwrap().clone();
    let started = sched.running_jobs(1)[0].started_s;
    let mut truth = EngineTruth::default();
    let kept = Placement {
        parts: vec![gang.parts[1]],
    };
    truth.running.insert(JobId(0), kept.clone());
    let diffs = sched.reconcile(&truth, None, started + 100);
    assert_eq!(
        diffs,
        vec![Difference::Shrunk {
            job: JobId(0),
            was: gang.clone(),
            now: kept.clone(),
        }]
    );
    assert_eq!(sched.state().free_gpus(), 8);
    assert!(sched.job(JobId(0)).unwrap().is_running());
    let running = &sched.running_jobs(started + 200)[0];
    assert_eq!(running.gpus, 8);
    assert_eq!(running.attained_gpu_s, 8 * 100 + 8 * 200);
    sched.check_invariants().unwrap();
    // The same truth again changes nothing, and a snapshot keeps the
    // shrunk gang.
    assert!(sched.reconcile(&truth, None, started + 150).is_empty());
    let restored = gangway_core::Scheduler::restore(
        support::build(&racks),
        support::policies(0),
        sched.snapshot(),
    )
    .unwrap();
    assert_eq!(restored.state().allocation(JobId(0)), Some(&kept));
    assert_eq!(restored.state().free_gpus(), 8);
    // The engine shows it on GPUs it never held: not a shrink.
    truth.running.insert(
        JobId(0),
        Placement {
            parts: vec![ServerGpus {
                server: gang.parts[0].server,
                gpus: 0x1,
            }],
        },
    );
    let diffs = sched.reconcile(&truth, None, started + 160);
    assert!(
        !diffs.iter().any(|d| matches!(d, Difference::Shrunk { .. })),
        "{diffs:?}"
    );
    sched.check_invariants().unwrap();
    // Ended: the whole VC holds nothing.
    sched
        .end_attempt(JobId(0), started + 300, gangway_core::AttemptEnd::Passed)
        .ok();
    sched.check_invariants().unwrap();
}
