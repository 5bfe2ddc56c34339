//! Budgets that fit the work: a module slow within each call's fuel (just
//! under it on every call, or only after many cheap calls) is stopped by
//! its work budget from its first slow call on; the same module without a
//! work budget answers every call.

use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_plugin_sdk::{Reclaim, ReclaimView};

use crate::guests;
use crate::support::past_trigger;

/// A reclaim view past the trigger: 20 VCs.
fn real_view() -> ReclaimView {
    ReclaimView {
        vcs: past_trigger().vcs,
        ..ReclaimView::default()
    }
}

fn engine(config: SandboxConfig) -> PolicyEngine {
    PolicyEngine::new(SandboxConfig {
        module_cache: None,
        ..config
    })
    .unwrap()
}

#[test]
fn a_call_just_under_its_fuel_answers_without_a_work_budget() {
    let engine = engine(SandboxConfig {
        work_budget: None,
        ..SandboxConfig::default()
    });
    let module = engine.load("slow.wasm", &guests::slow_reclaim(0)).unwrap();
    let mut backend = module.backend::<Reclaim>(b"").unwrap();
    for _ in 0..2 {
        backend.decide(&real_view()).unwrap();
    }
}

/// Under the default work budget the module answers its cheap calls and
/// fails, with a work-budget error, from its first slow call on, or once
/// the window's unused allowance is spent (three failures in a row
/// quarantine it in a scheduler's slot; the replay's hostile runs show
/// that end to end).
fn stopped_by_its_work_budget(after: u32) {
    let module = engine(SandboxConfig::default())
        .load("slow.wasm", &guests::slow_reclaim(after))
        .unwrap();
    let mut backend = module.backend::<Reclaim>(b"").unwrap();
    for call in 0..after {
        backend
            .decide(&real_view())
            .unwrap_or_else(|e| panic!("cheap call {call}: {e}"));
    }
    // The window's unused allowance (what its cheap calls left: 20 times
    // the reclaim built-ins' 340,000 units each, for at most 31 of them)
    // lets a few slow calls of 176 million through: never more than
    // `burst`. Then a call fails; a fresh instance of this guest is cheap
    // again for `after` calls, so only a guest slow on every call fails
    // three times in a row (and is quarantined).
    let burst = u64::from(after.min(31)) * 20 * 340_000 / 176_000_000;
    let through = (0..=burst)
        .take_while(|_| backend.decide(&real_view()).is_ok())
        .count();
    assert!(through as u64 <= burst, "{through} slow calls answered");
    let failures = if after == 0 { 3 } else { 0 };
    for _ in 0..failures {
        let e = backend.decide(&real_view()).unwrap_err();
        assert!(
            matches!(
                e.kind,
                PolicyErrorKind::WorkBudget {
                    factor: 20,
                    window: 32,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn a_module_just_under_each_calls_fuel_is_quarantined() {
    stopped_by_its_work_budget(0);
}

#[test]
fn a_module_slow_after_forty_cheap_calls_is_quarantined() {
    stopped_by_its_work_budget(40);
}

/// The fairness guest that keeps the view's order answers validly, slow
/// or not: without a work budget a scheduler runs it every round with no
/// error; with the default budget it is quarantined after three calls.
#[test]
fn a_valid_fairness_guest_just_under_each_calls_fuel_is_quarantined() {
    use crate::support::{accounted, run, scheduler};
    use gangway_core::policy::GuardSettings;
    use gangway_plugin_sdk::Fairness;
    for (work_budget, errors) in [
        (None, 0),
        (Some(gangway_core::wasm::WorkBudget::default()), 3),
    ] {
        let module = engine(SandboxConfig {
            work_budget,
            ..SandboxConfig::default()
        })
        .load("slow.wasm", &guests::slow_fairness(0))
        .unwrap();
        let mut sched = scheduler(30);
        sched.policies_mut().set_guard(GuardSettings::default());
        sched.swap::<Fairness>(module.backend::<Fairness>(b"").unwrap());
        let reports = run(&mut sched, 100, 5);
        let got: Vec<_> = reports.iter().flat_map(|r| &r.policy_errors).collect();
        assert_eq!(got.len(), errors, "{got:?}");
        assert!(
            got.iter()
                .all(|e| matches!(e.kind, PolicyErrorKind::WorkBudget { .. })),
            "{got:?}"
        );
        accounted(&sched, 31);
    }
}
