//! The conformance kit on policies that take the GPU types (contract 2.2):
//! it drives their typed calls (`order_typed`, `reclaim_typed`) beside
//! generated types views, passes a policy that keeps the rules, and fails
//! one whose type choices break them, with a regression test that rebuilds
//! the view and the types.
#![allow(clippy::unwrap_used)]

use gangway_core::conformance::{self, FindingKind, Options};
use gangway_plugin_sdk::{
    Fairness, FairnessDecision, FairnessPolicy, FairnessView, GpuTypeId, Ranked, Reclaim,
    ReclaimDecision, ReclaimPolicy, ReclaimView, TypeChoice, TypeChoices, TypesView,
};

/// Every job in view order, eligible.
fn in_order(view: &FairnessView) -> FairnessDecision {
    FairnessDecision {
        order: view
            .jobs
            .iter()
            .map(|j| Ranked {
                job: j.id,
                eligible: true,
            })
            .collect(),
    }
}

/// How a test policy chooses types.
#[derive(Clone, Copy, Debug)]
enum Choose {
    /// Each job's most preferred type: keeps the rules.
    Preferred,
    /// A type no job may use (one past the cluster's last type).
    NotAllowed,
    /// The first job's preferred type, twice.
    Twice,
    /// A type for a job the view does not have.
    Stranger,
}

#[derive(Clone, Copy, Debug)]
struct Typed(Choose);

impl FairnessPolicy for Typed {
    fn order(&self, view: &FairnessView) -> FairnessDecision {
        in_order(view)
    }
    const GPU_TYPES: bool = true;
    fn order_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        let preferred = types.jobs.iter().map(|j| TypeChoice {
            job: j.job,
            gpu_type: j.allowed[0],
        });
        let mut choices: Vec<TypeChoice> = preferred.collect();
        match self.0 {
            Choose::Preferred => {}
            Choose::NotAllowed => {
                let beyond = GpuTypeId(types.types.len() as u8);
                choices.iter_mut().for_each(|c| c.gpu_type = beyond);
            }
            Choose::Twice => {
                if let Some(&c) = choices.first() {
                    choices.push(c);
                }
            }
            Choose::Stranger => choices.push(TypeChoice {
                job: gangway_plugin_sdk::JobId(u64::MAX),
                gpu_type: GpuTypeId(0),
            }),
        }
        (in_order(view), TypeChoices { choices })
    }
}

fn options() -> Options {
    Options {
        scenarios: 1,
        ..Options::quick()
    }
}

#[test]
fn a_typed_policy_that_keeps_the_rules_passes_and_its_typed_calls_are_made() {
    let report = conformance::policy::<Fairness>(Typed(Choose::Preferred), &options())
        .unwrap_or_else(|f| panic!("{f}"));
    // Both calls on every view, each twice: the typed calls are half.
    assert!(report.typed_calls >= 2 * report.views, "{report:?}");
}

/// A failing typed call: the finding names the rule the core's guard
/// checks, and its regression test rebuilds the view and the types and
/// checks them with `check_typed_view`.
fn fails_with(choose: Choose, rule: &str) {
    let failure = conformance::policy::<Fairness>(Typed(choose), &options()).unwrap_err();
    assert!(
        matches!(&failure.kind, FindingKind::Invalid(k) if k.to_string().contains(rule)),
        "{choose:?}: {failure}"
    );
    let types = failure.types().expect("the types beside the failing view");
    assert!(
        types.starts_with(
            "let types = gangway_plugin_sdk::wire::decode_typed::<gangway_plugin_sdk::TypesView>(&["
        ),
        "{types}"
    );
    let test = failure.regression_test().unwrap();
    assert!(
        test.contains("check_typed_view::<gangway_plugin_sdk::Fairness>(policy, &view, &types)"),
        "{test}"
    );
    // The printed types decode, and the policy fails on them again.
    let bytes: Vec<u8> = types
        .split_once("(&[")
        .and_then(|(_, rest)| rest.split_once("])"))
        .map(|(list, _)| {
            list.split(", ")
                .filter(|b| !b.is_empty())
                .map(|b| b.parse().unwrap())
                .collect()
        })
        .unwrap();
    let types: TypesView = gangway_plugin_sdk::wire::decode_typed(&bytes).unwrap();
    let view_line = failure.view().unwrap();
    let view_bytes: Vec<u8> = view_line
        .split_once("(&[")
        .and_then(|(_, rest)| rest.split_once("])"))
        .map(|(list, _)| {
            list.split(", ")
                .filter(|b| !b.is_empty())
                .map(|b| b.parse().unwrap())
                .collect()
        })
        .unwrap();
    let view = gangway_plugin_sdk::wire::decode_view::<Fairness>(&view_bytes).unwrap();
    let policy = Box::new(gangway_core::policy::Native::new("typed", Typed(choose)));
    let again = conformance::check_typed_view::<Fairness>(policy, &view, &types).unwrap_err();
    assert_eq!(again.kind, failure.kind);
    // Shrunk: a failing view of one job (two for a second choice).
    assert!(view.jobs.len() <= 1, "{view:?}");
}

#[test]
fn a_choice_of_a_type_the_job_may_not_use_fails() {
    fails_with(Choose::NotAllowed, "which may not run on it");
}

#[test]
fn a_second_choice_for_a_job_fails() {
    fails_with(Choose::Twice, "twice");
}

#[test]
fn a_choice_for_a_job_the_view_does_not_have_fails() {
    fails_with(Choose::Stranger, "which the view does not have");
}

/// A reclaim policy that, given the types, stops a running job for no job
/// to start: the typed call breaks the reclaim rules, the plain one not.
#[derive(Clone, Copy)]
struct StopsForNothing;

impl ReclaimPolicy for StopsForNothing {
    fn reclaim(&self, _: &ReclaimView) -> ReclaimDecision {
        ReclaimDecision::default()
    }
    const GPU_TYPES: bool = true;
    fn reclaim_typed(&self, view: &ReclaimView, types: &TypesView) -> ReclaimDecision {
        let _ = types;
        ReclaimDecision {
            stop: view.running.iter().take(1).map(|j| j.id).collect(),
            start: Vec::new(),
        }
    }
}

#[test]
fn a_typed_reclaim_call_is_checked_by_the_reclaim_rules() {
    let failure = conformance::policy::<Reclaim>(StopsForNothing, &options()).unwrap_err();
    assert!(matches!(failure.kind, FindingKind::Invalid(_)), "{failure}");
    assert!(failure.types().is_some(), "{failure}");
}

/// A typed call whose answer depends on the calls before it.
#[derive(Clone, Default)]
struct Forgetful(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl FairnessPolicy for Forgetful {
    fn order(&self, view: &FairnessView) -> FairnessDecision {
        in_order(view)
    }
    const GPU_TYPES: bool = true;
    fn order_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let choices = types
            .jobs
            .iter()
            .take(1)
            .map(|j| TypeChoice {
                job: j.job,
                gpu_type: j.allowed[n as usize % j.allowed.len()],
            })
            .collect();
        (in_order(view), TypeChoices { choices })
    }
}

#[test]
fn a_typed_call_must_be_deterministic() {
    let failure = conformance::policy::<Fairness>(Forgetful::default(), &options()).unwrap_err();
    assert!(
        matches!(failure.kind, FindingKind::Nondeterministic { .. }),
        "{failure}"
    );
}

/// het-max-min (a fairness and a reclaim policy that take the types) is
/// checked through its typed calls too, as its own conformance test runs it.
#[test]
fn het_max_min_is_checked_through_its_typed_calls() {
    let fairness =
        conformance::defaults::<Fairness, gangway_policy_het_max_min::HetMaxMin>(&options())
            .unwrap_or_else(|f| panic!("{f}"));
    assert!(fairness.typed_calls >= 2 * fairness.views, "{fairness:?}");
    let reclaim =
        conformance::defaults::<Reclaim, gangway_policy_het_max_min::HetPreempt>(&options())
            .unwrap_or_else(|f| panic!("{f}"));
    assert!(reclaim.typed_calls >= 2 * reclaim.views, "{reclaim:?}");
}

/// A policy that does not take the types is asked only the plain calls.
#[test]
fn a_policy_that_does_not_take_the_types_gets_no_typed_call() {
    let report = conformance::policy::<Fairness>(gangway_plugin_sdk::FifoQuota, &options())
        .unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.typed_calls, 0);
}

/// het-max-min built as a Wasm module: the types and choices cross the
/// sandbox on every typed call the kit makes.
#[test]
fn het_max_min_as_a_module_is_checked_through_its_typed_calls() {
    let engine = gangway_core::wasm::PolicyEngine::new(Default::default()).unwrap();
    let bytes = gangway_plugin_artifacts::module("het-max-min").expect("the het-max-min module");
    let module = engine.load("het-max-min", bytes).unwrap();
    let reports = conformance::module(&module, b"", &options()).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(reports.len(), 2, "{reports:?}");
    for r in &reports {
        assert!(r.typed_calls >= 2 * r.views, "{r:?}");
    }
}
