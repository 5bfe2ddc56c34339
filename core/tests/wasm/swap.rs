//! Hot swap under load, quarantine with the last good module restored, and
//! rollback: every slot of every scheduler is guarded, natively or with Wasm.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gangway_core::policy::{GuardSettings, Native, PolicyErrorKind, SlotEvent};
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_core::{AttemptEnd, JobId, JobSpec, JobState, Scheduler, Slot, Topology};
use gangway_plugin_sdk::{Fairness, Gang, Locality};

use crate::guests;
use crate::support::{accounted, run, scheduler};

/// How events name a module: its name and the start of its hash.
fn identity(module: &gangway_core::wasm::PolicyModule) -> String {
    format!("{}@{}", module.name(), &module.hash()[..12])
}

/// Two modules loaded from one path are two identities: the quarantined
/// one and the one restored are told apart in events and status.
#[test]
fn modules_replaced_at_one_path_have_two_identities() {
    let engine = guests::engine();
    let good = engine
        .load(
            "policy.wasm",
            gangway_plugin_artifacts::module("fifo").unwrap(),
        )
        .unwrap();
    let bad = engine
        .load("policy.wasm", &guests::hostile("trap"))
        .unwrap();
    let mut sched = scheduler(40);
    let handle = sched.policies().slot::<Fairness>().handle();
    handle.stage(good.backend::<Fairness>(b"").unwrap());
    run(&mut sched, 100, 1);
    handle.stage(bad.backend::<Fairness>(b"").unwrap());
    run(&mut sched, 200, 3);
    let status = handle.status();
    assert_eq!(status.active, "policy.wasm");
    assert_ne!(identity(&good), identity(&bad));
    assert_eq!(status.active_identity, identity(&good));
    assert_eq!(status.quarantined(), vec![identity(&bad).as_str()]);
    assert!(matches!(
        status.events.last(),
        Some(SlotEvent::Quarantined { module, restored, .. })
            if *module == identity(&bad) && *restored == identity(&good)
    ));
}

fn plugin(engine: &PolicyEngine, name: &str) -> gangway_core::wasm::PolicyModule {
    engine
        .load(name, gangway_plugin_artifacts::module(name).unwrap())
        .unwrap()
}

#[test]
fn a_failing_module_is_quarantined_and_the_last_good_one_restored() {
    let engine = guests::engine();
    let fifo = plugin(&engine, "fifo");
    let trap = engine.load("trap", &guests::hostile("trap")).unwrap();
    let mut sched = scheduler(80);
    sched.policies_mut().set_guard(GuardSettings {
        quarantine_after: 3,
        keep_previous: 2,
        ..GuardSettings::default()
    });
    let handle = sched.policies().slot::<Fairness>().handle();

    handle.stage(fifo.backend::<Fairness>(b"").unwrap());
    let r = run(&mut sched, 100, 1);
    assert!(r[0].policy_errors.is_empty());
    assert_eq!(handle.status().active, "fifo");

    handle.stage(trap.backend::<Fairness>(b"").unwrap());
    let r = run(&mut sched, 200, 3);
    for report in &r {
        assert_eq!(report.policy_errors.len(), 1);
        assert!(matches!(
            report.policy_errors[0].kind,
            PolicyErrorKind::Trap(_)
        ));
        assert_eq!(report.policy_errors[0].module, "trap");
    }
    let status = handle.status();
    assert_eq!(status.active, "fifo", "the last good module is back");
    let (trap_id, fifo_id) = (identity(&trap), identity(&fifo));
    assert_eq!(status.active_identity, fifo_id);
    assert_eq!(status.quarantined(), vec![trap_id.as_str()]);
    assert!(matches!(
        status.events.last(),
        Some(SlotEvent::Quarantined { module, restored, .. }) if *module == trap_id && *restored == fifo_id
    ));
    // From the next round on, fifo answers again and nothing fails.
    let r = run(&mut sched, 500, 3);
    assert!(r.iter().all(|x| x.policy_errors.is_empty()));
    assert!(r.iter().map(|x| x.starts.len()).sum::<usize>() > 0);
    assert_eq!(sched.slot_health(Slot::Fairness).consecutive, 0);
    accounted(&sched, 81);
}

#[test]
fn rollback_goes_back_one_step_and_never_past_the_baseline() {
    let engine = guests::engine();
    let builtin = plugin(&engine, "fallbacks");
    let mut sched = scheduler(20);
    let handle = sched.policies().slot::<Gang>().handle();
    handle.stage(builtin.backend::<Gang>(b"").unwrap());
    assert!(handle.is_pending());
    run(&mut sched, 100, 1);
    assert!(!handle.is_pending());
    assert_eq!(handle.status().active, "fallbacks");
    assert_eq!(handle.status().previous, vec!["backfill".to_string()]);
    handle.rollback();
    run(&mut sched, 200, 1);
    assert_eq!(handle.status().active, "backfill");
    handle.rollback();
    run(&mut sched, 300, 1);
    let status = handle.status();
    assert_eq!(status.active, "backfill");
    assert!(matches!(
        status.events.last(),
        Some(SlotEvent::RollbackRefused { .. })
    ));
    accounted(&sched, 21);
}

#[test]
fn keep_previous_bounds_the_rollback_stack() {
    let engine = guests::engine();
    let builtin = plugin(&engine, "fallbacks");
    let mut sched = scheduler(10);
    sched.policies_mut().set_guard(GuardSettings {
        quarantine_after: 3,
        keep_previous: 1,
        ..GuardSettings::default()
    });
    let handle = sched.policies().slot::<Locality>().handle();
    for t in 0..4 {
        handle.stage(builtin.backend::<Locality>(b"").unwrap());
        sched.round(t).unwrap();
    }
    let status = handle.status();
    assert_eq!(status.swaps, 4);
    // Active + one previous + the baseline.
    assert_eq!(
        status.previous,
        vec!["fallbacks".to_string(), "strict".to_string()]
    );
}

/// Modules are swapped from another thread while rounds run with jobs
/// arriving, running and ending. Every job is accounted for: each start in a
/// report was pending just before and is running just after, no job starts
/// twice without ending in between, and the scheduler's table matches a
/// mirror kept from the reports alone.
#[test]
fn hot_swap_under_load_loses_no_job() {
    let engine = PolicyEngine::new(SandboxConfig::default()).unwrap();
    let fairness: Vec<_> = ["fifo", "fallbacks", "vc-quota", "max-min", "las"]
        .iter()
        .map(|n| plugin(&engine, n))
        .collect();
    let locality: Vec<_> = ["delay", "greedy", "fallbacks"]
        .iter()
        .map(|n| plugin(&engine, n))
        .collect();
    let mut sched = Scheduler::new(Topology::uniform(4, 8, 8).unwrap());
    let fhandle = sched.policies().slot::<Fairness>().handle();
    let lhandle = sched.policies().slot::<Locality>().handle();
    let vcs = [
        sched.virtual_cluster("a"),
        sched.virtual_cluster("b"),
        sched.virtual_cluster("c"),
    ];
    sched.set_quota(vcs[2], Some(64));

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                fhandle.stage(
                    fairness[n % fairness.len()]
                        .backend::<Fairness>(b"")
                        .unwrap(),
                );
                lhandle.stage(
                    locality[n % locality.len()]
                        .backend::<Locality>(b"")
                        .unwrap(),
                );
                n += 1;
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            (n, fhandle.status(), lhandle.status())
        })
    };

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Mirror {
        Pending,
        Running,
        Done,
    }
    let mut mirror: BTreeMap<JobId, Mirror> = BTreeMap::new();
    let mut next = 0u64;
    let mut starts = 0usize;
    for round in 0..300u64 {
        let now = round * 60;
        for k in 0..4 {
            let id = JobId(next);
            next += 1;
            sched
                .submit(JobSpec {
                    id,
                    vc: vcs[(k + round as usize) % 3],
                    user: k as u32,
                    gpus: [1, 2, 4, 8, 16, 32][((next * 7) % 6) as usize],
                    submitted_s: now,
                })
                .unwrap();
            mirror.insert(id, Mirror::Pending);
        }
        // End some running jobs: passed, or failed and retried.
        let running: Vec<JobId> = mirror
            .iter()
            .filter(|(_, m)| **m == Mirror::Running)
            .map(|(id, _)| *id)
            .collect();
        for (i, id) in running.iter().enumerate() {
            if (id.0 + round) % 3 == 0 {
                let retry = i % 5 == 0;
                let end = if retry {
                    AttemptEnd::FAILED
                } else {
                    AttemptEnd::Passed
                };
                sched.end_attempt(*id, now, end).unwrap();
                mirror.insert(*id, if retry { Mirror::Pending } else { Mirror::Done });
            }
        }
        let report = sched.round(now).unwrap();
        assert!(
            report.policy_errors.is_empty(),
            "{:?}",
            report.policy_errors
        );
        // Failures are retried at once by the built-in retry policy.
        for (id, _) in &report.retries {
            assert_eq!(mirror.get(id), Some(&Mirror::Pending));
        }
        for s in &report.starts {
            assert_eq!(
                mirror.get(&s.job),
                Some(&Mirror::Pending),
                "{} started twice",
                s.job
            );
            mirror.insert(s.job, Mirror::Running);
            starts += 1;
        }
        for (id, _) in &report.waiting {
            assert_eq!(mirror.get(id), Some(&Mirror::Pending));
        }
        sched.check_invariants().unwrap();
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let (staged, fstatus, lstatus) = swapper.join().unwrap();

    assert_eq!(sched.jobs().len(), mirror.len());
    for (id, m) in &mirror {
        let state = &sched.job(*id).unwrap().state;
        let same = matches!(
            (m, state),
            (Mirror::Pending, JobState::Pending { .. })
                | (Mirror::Running, JobState::Running { .. })
                | (Mirror::Done, JobState::Finished { .. })
        );
        assert!(same, "{id}: mirror {m:?}, scheduler {state:?}");
    }
    let attempts: u32 = sched.jobs().values().map(|j| j.attempts).sum();
    assert_eq!(
        attempts as usize, starts,
        "every start is one attempt, none twice"
    );
    assert!(staged > 10, "the swapper staged {staged} times");
    assert!(
        fstatus.swaps > 10 && lstatus.swaps > 10,
        "{} {}",
        fstatus.swaps,
        lstatus.swaps
    );
    assert!(starts > 500);
}

/// A native host gets the same guard: a native policy that misbehaves is
/// quarantined and the previous one restored, without Wasm anywhere.
#[test]
fn native_policies_are_quarantined_too() {
    struct Omits;
    impl gangway_plugin_sdk::FairnessPolicy for Omits {
        fn order(
            &self,
            _: &gangway_plugin_sdk::FairnessView,
        ) -> gangway_plugin_sdk::FairnessDecision {
            gangway_plugin_sdk::FairnessDecision::default()
        }
    }
    let mut sched = scheduler(30);
    sched.swap::<Fairness>(Box::new(Native::new("omits", Omits)));
    let r = run(&mut sched, 100, 4);
    let errors: Vec<usize> = r.iter().map(|x| x.policy_errors.len()).collect();
    assert_eq!(
        errors,
        [1, 1, 1, 0],
        "quarantined after 3 failures in a row"
    );
    let status = sched.policies().slot::<Fairness>().status();
    assert_eq!(status.quarantined(), vec!["omits"]);
    assert_eq!(status.active, "fifo-quota");
    assert_eq!(sched.slot_health(Slot::Fairness).quarantines, 1);
    accounted(&sched, 31);
}

/// A host that starts with an untrusted policy as the slot's baseline (as
/// `replay --fairness MODULE` does) is protected as well: a baseline that
/// fails three rounds in a row is quarantined and the built-in policy
/// becomes the baseline, so later rounds pay nothing for it.
#[test]
fn a_failing_baseline_gives_way_to_the_builtin() {
    struct Omits;
    impl gangway_plugin_sdk::FairnessPolicy for Omits {
        fn order(
            &self,
            _: &gangway_plugin_sdk::FairnessView,
        ) -> gangway_plugin_sdk::FairnessDecision {
            gangway_plugin_sdk::FairnessDecision::default()
        }
    }
    let topology = gangway_core::Topology::uniform(2, 4, 8).unwrap();
    let policies = gangway_core::policy::PolicySet::fallbacks()
        .with::<Fairness>(Box::new(Native::new("omits", Omits)));
    let mut sched = gangway_core::Scheduler::with_policies(topology, policies);
    let mut twin = scheduler(30);
    // The same VCs (in the same order) and jobs as the fixture.
    for vc in twin.virtual_clusters() {
        let id = sched.virtual_cluster(&vc.name);
        sched.set_quota(id, vc.quota_gpus);
    }
    let mut specs: Vec<_> = twin.jobs().values().map(|j| j.spec.clone()).collect();
    specs.sort_by_key(|s| s.submitted_s);
    for spec in specs {
        sched.submit(spec).unwrap();
    }
    let r = run(&mut sched, 100, 5);
    let errors: Vec<usize> = r.iter().map(|x| x.policy_errors.len()).collect();
    assert_eq!(errors, [1, 1, 1, 0, 0]);
    let status = sched.policies().slot::<Fairness>().status();
    assert_eq!(status.quarantined(), vec!["omits"]);
    assert_eq!(status.active, "fifo-quota");
    assert!(status.previous.is_empty(), "{status:?}");
    // From then on it decides exactly as a default scheduler does.
    let expected = run(&mut twin, 100, 5);
    assert_eq!(r[4].starts, expected[4].starts);
    accounted(&sched, 31);
}
