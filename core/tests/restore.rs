//! Snapshot and restore: after any sequence of events, a scheduler restored
//! from its snapshot (through the encoded bytes) holds the same state, passes
//! its invariant check, and from then on decides exactly as the original
//! would: same starts, same wait reasons, same reservations, same records.
#![allow(clippy::unwrap_used)]

mod support;

use gangway_core::Scheduler;
use gangway_core::snapshot::Snapshot;
use proptest::prelude::*;
use support::{Host, apply, build, op, policies, scheduler, topology};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn restored_scheduler_decides_as_the_original(
        racks in topology(),
        which in 0u8..3,
        before in prop::collection::vec(op(), 0..80),
        after in prop::collection::vec(op(), 1..60),
    ) {
        let mut original = scheduler(&racks, which);
        let mut host = Host::default();
        for op in &before {
            apply(&mut original, &mut host, op);
        }
        let bytes = original.snapshot().to_bytes().unwrap();
        let snapshot = Snapshot::from_bytes(&bytes).unwrap();
        let mut restored = Scheduler::restore(build(&racks), policies(which), snapshot).unwrap();
        restored.check_invariants().unwrap();
        prop_assert_eq!(restored.jobs(), original.jobs());
        prop_assert_eq!(restored.virtual_clusters(), original.virtual_clusters());
        prop_assert_eq!(restored.state().allocations(), original.state().allocations());
        prop_assert_eq!(restored.snapshot().to_bytes().unwrap(), bytes);

        // The very next round first, then the rest of the events.
        let mut host_b = host.clone();
        let next = support::Op::Round { advance: 1 };
        let a = apply(&mut original, &mut host, &next);
        let b = apply(&mut restored, &mut host_b, &next);
        prop_assert_eq!(a, b, "the next round decides the same");
        for op in &after {
            let a = apply(&mut original, &mut host, op);
            let b = apply(&mut restored, &mut host_b, op);
            prop_assert_eq!(a, b, "after {:?}", op);
        }
        prop_assert_eq!(restored.jobs(), original.jobs());
        restored.check_invariants().unwrap();
    }
}

/// The property above is not vacuous: the runs it compares start jobs, keep
/// some waiting with reasons and make reservations.
#[test]
fn the_compared_runs_do_schedule() {
    let racks = vec![vec![8, 8], vec![8, 4]];
    let mut sched = scheduler(&racks, 1);
    let mut host = Host::default();
    let mut reports = Vec::new();
    let mut restored_mid_retry = 0;
    for i in 0..60u32 {
        let ops = [
            support::Op::Submit {
                gpus: [1, 16, 4, 8, 2][(i % 5) as usize],
                vc: (i % 3) as u8,
            },
            support::Op::Round { advance: 30 },
            support::Op::End {
                pick: i as usize,
                outcome: (i % 2) as u8,
            },
        ];
        for op in &ops {
            reports.extend(apply(&mut sched, &mut host, op));
        }
        // A snapshot taken while retries wait out their delay restores them.
        if sched.retrying_len() > 0 {
            let restored =
                Scheduler::restore(build(&racks), policies(1), sched.snapshot()).unwrap();
            assert_eq!(restored.retrying_len(), sched.retrying_len());
            assert_eq!(restored.next_retry_s(), sched.next_retry_s());
            restored_mid_retry += 1;
        }
    }
    assert!(restored_mid_retry > 0, "no retry was ever delayed");
    assert!(reports.iter().any(|r| !r.retries.is_empty()));
    assert!(
        reports.iter().any(|r| r.queued > 0),
        "the view window never bound"
    );
    assert!(reports.iter().any(|r| !r.starts.is_empty()));
    assert!(reports.iter().any(|r| !r.waiting.is_empty()));
    assert!(reports.iter().any(|r| !r.reservations.is_empty()));
    let restored = Scheduler::restore(build(&racks), policies(1), sched.snapshot()).unwrap();
    assert_eq!(restored.jobs(), sched.jobs());
}
