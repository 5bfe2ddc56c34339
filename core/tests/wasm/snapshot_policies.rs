//! A snapshot records each slot's policy (name, module hash, configuration),
//! and `PolicyEngine::policies_of` rebuilds the set from it: the restored
//! scheduler then decides as the original; wrong or missing module bytes
//! and a different native policy are refused by slot.

use gangway_core::policy::{Fairness, Native, PolicySet, Reclaim};
use gangway_core::snapshot::{Snapshot, SnapshotError};
use gangway_core::wasm::PolicyEngine;
use gangway_core::{Scheduler, Slot, Topology};

use crate::guests;
use crate::support::{run, scheduler};

fn bytes(name: &str) -> Vec<u8> {
    gangway_plugin_artifacts::module(name).unwrap().to_vec()
}

/// A scheduler mid-run with LAS (configured) in two slots and the
/// built-in policies elsewhere, and its snapshot.
fn with_las(engine: &PolicyEngine) -> (Scheduler, Snapshot) {
    let las = engine.load("las.wasm", &bytes("las")).unwrap();
    let config = b"thresholds_gpu_s = [60, 600]";
    let mut sched = scheduler(60);
    run(&mut sched, 100, 3);
    sched.swap::<Fairness>(las.backend::<Fairness>(config).unwrap());
    sched.swap::<Reclaim>(las.backend::<Reclaim>(config).unwrap());
    run(&mut sched, 400, 2);
    let snapshot = Snapshot::from_bytes(&sched.snapshot().to_bytes().unwrap()).unwrap();
    (sched, snapshot)
}

#[test]
fn the_recorded_policies_are_rebuilt_and_decide_as_before() {
    let engine = guests::engine();
    let (mut original, snapshot) = with_las(&engine);
    let recorded = snapshot.policies();
    assert_eq!(recorded.len(), Slot::ALL.len());
    let (_, fairness) = recorded.iter().find(|(s, _)| *s == Slot::Fairness).unwrap();
    assert_eq!(fairness.name, "las.wasm");
    assert_eq!(fairness.config, b"thresholds_gpu_s = [60, 600]");
    assert_eq!(fairness.module_sha256.as_deref().map(str::len), Some(64));
    let (_, locality) = recorded.iter().find(|(s, _)| *s == Slot::Locality).unwrap();
    assert_eq!(locality.module_sha256, None);

    let las = bytes("las");
    let policies = engine
        .policies_of(&snapshot, PolicySet::fallbacks(), |o| {
            (o.name == "las.wasm").then(|| las.clone())
        })
        .unwrap();
    assert_eq!(policies.origins(), recorded);
    let mut restored =
        Scheduler::restore(Topology::uniform(2, 4, 8).unwrap(), policies, snapshot).unwrap();
    let a = run(&mut original, 600, 8);
    let b = run(&mut restored, 600, 8);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(original.jobs(), restored.jobs());
}

#[test]
fn missing_or_foreign_bytes_and_another_native_policy_are_refused_by_slot() {
    let engine = guests::engine();
    let (_, snapshot) = with_las(&engine);
    let slot_of = |e: SnapshotError| match e {
        SnapshotError::Policy { slot, why } => (slot, why),
        other => panic!("expected a policy error, got {other}"),
    };

    let err = engine
        .policies_of(&snapshot, PolicySet::fallbacks(), |_| None)
        .unwrap_err();
    let (slot, why) = slot_of(err);
    assert_eq!(slot, Slot::Fairness);
    assert!(
        why.contains("no bytes given for its module las.wasm"),
        "{why}"
    );

    let fifo = bytes("fifo");
    let err = engine
        .policies_of(&snapshot, PolicySet::fallbacks(), |_| Some(fifo.clone()))
        .unwrap_err();
    let (_, why) = slot_of(err);
    assert!(why.contains("are another module"), "{why}");

    // The locality slot ran its built-in policy natively; a base set with
    // another native locality policy is not the recorded one.
    let base = PolicySet::fallbacks().with::<gangway_core::policy::Locality>(Box::new(
        Native::new("strict-too", gangway_plugin_sdk::Strict),
    ));
    let las = bytes("las");
    let err = engine
        .policies_of(&snapshot, base, |_| Some(las.clone()))
        .unwrap_err();
    let (slot, why) = slot_of(err);
    assert_eq!(slot, Slot::Locality);
    assert!(why.contains("\"strict-too\""), "{why}");
}

#[test]
fn a_version_1_snapshot_still_restores_without_recorded_policies() {
    let engine = guests::engine();
    // Version 1 was version 2 without the trailing policy list.
    let mut sched = scheduler(20);
    run(&mut sched, 100, 2);
    let v2 = sched.snapshot().to_bytes().unwrap();
    let plain = Scheduler::restore(
        Topology::uniform(2, 4, 8).unwrap(),
        PolicySet::fallbacks(),
        Snapshot::from_bytes(&v2).unwrap(),
    )
    .unwrap();
    let policies_len = postcard::to_allocvec(&plain.snapshot().policies().to_vec())
        .unwrap()
        .len();
    let mut v1 = v2[..v2.len() - policies_len].to_vec();
    assert_eq!(v1[6], 2, "a snapshot without GPU types is version 2");
    v1[6] = 1;
    let snapshot = Snapshot::from_bytes(&v1).unwrap();
    assert_eq!(snapshot.version(), 1);
    assert!(snapshot.policies().is_empty());
    let base = PolicySet::fallbacks();
    let policies = engine.policies_of(&snapshot, base, |_| None).unwrap();
    let restored =
        Scheduler::restore(Topology::uniform(2, 4, 8).unwrap(), policies, snapshot).unwrap();
    assert_eq!(restored.jobs(), sched.jobs());
}
