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

/// quota-reclaim takes the types (quotas per type, the servers' types): the
/// kit drives its typed calls natively and through its module.
#[test]
fn quota_reclaim_is_checked_through_its_typed_calls_natively_and_as_a_module() {
    let native =
        conformance::defaults::<Reclaim, gangway_policy_quota_reclaim::QuotaReclaim>(&options())
            .unwrap_or_else(|f| panic!("{f}"));
    assert!(native.typed_calls >= 2 * native.views, "{native:?}");
    let engine = gangway_core::wasm::PolicyEngine::new(Default::default()).unwrap();
    let bytes = gangway_plugin_artifacts::module("quota-reclaim").expect("the module");
    let module = engine.load("quota-reclaim", bytes).unwrap();
    let reports = conformance::module(&module, b"", &options()).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].typed_calls >= 2 * reports[0].views,
        "{reports:?}"
    );
}

/// Reclaim per type end to end, natively and through the sandbox alike:
/// VC `a` (8 A100s and 8 V100s nominal) runs 16 A100s and 8 V100s (24
/// against its 16 in sum, which vc-quota lends it), over its nominal quota
/// only of A100s; VC `b` (8
/// A100s nominal) submits an A100 job and VC `c` (16 V100s nominal, 8 held)
/// a V100 job. With quota-reclaim, which takes the types, `a`'s newest
/// A100 job is stopped and `b`'s starts in its place; `c`'s job waits, as
/// no V100 work is borrowed (stopping A100 work would not help it).
#[test]
fn quota_reclaim_takes_back_a_borrowed_type_natively_and_as_a_module() {
    use gangway_core::policy::{BoxedBackend, Native, PolicySet};
    use gangway_core::{GpuRequest, JobId, JobSpec, Scheduler, TopologyBuilder, TypeQuota};
    let run = |backend: BoxedBackend<Reclaim>| {
        let mut b = TopologyBuilder::new();
        let a100 = b.add_gpu_type("a100", 80).unwrap();
        let v100 = b.add_gpu_type("v100", 32).unwrap();
        for (r, t) in [("ra", a100), ("rv", v100)] {
            let rack = b.add_domain(b.root(), r).unwrap();
            for s in 0..2 {
                b.add_server_of_type(rack, format!("{r}{s}"), 8, t).unwrap();
            }
        }
        // vc-quota lends idle GPUs past a VC's quota (what reclaim takes
        // back).
        let fairness: BoxedBackend<gangway_plugin_sdk::Fairness> = Box::new(Native::new(
            "vc-quota",
            gangway_policy_vc_quota::VcQuota::default(),
        ));
        let policies = PolicySet::fallbacks().with(fairness).with(backend);
        let mut sched = Scheduler::with_policies(b.build().unwrap(), policies);
        let (va, vb, vc) = (
            sched.virtual_cluster("a"),
            sched.virtual_cluster("b"),
            sched.virtual_cluster("c"),
        );
        let q = TypeQuota::new;
        sched.set_type_quotas(va, [(a100, q(8, None)), (v100, q(8, None))].into());
        sched.set_type_quotas(vb, [(a100, q(8, None))].into());
        sched.set_type_quotas(vc, [(v100, q(16, None))].into());
        let spec = |id, vc, t| JobSpec {
            id: JobId(id),
            vc,
            user: 0,
            gpus: 8,
            submitted_s: t,
        };
        let only = |t: &str| GpuRequest::types([t]);
        sched
            .submit_requesting(spec(1, va, 0), &only("a100"))
            .unwrap();
        sched
            .submit_requesting(spec(2, va, 1), &only("a100"))
            .unwrap();
        sched
            .submit_requesting(spec(3, va, 2), &only("v100"))
            .unwrap();
        sched
            .submit_requesting(spec(4, vc, 3), &only("v100"))
            .unwrap();
        let first = sched.round(10).unwrap();
        let mut began: Vec<u64> = first.starts.iter().map(|s| s.job.0).collect();
        began.sort_unstable();
        sched
            .submit_requesting(spec(5, vb, 11), &only("a100"))
            .unwrap();
        sched
            .submit_requesting(spec(6, vc, 12), &only("v100"))
            .unwrap();
        let report = sched.round(20).unwrap();
        sched.check_invariants().unwrap();
        assert!(
            report.policy_errors.is_empty(),
            "{:?}",
            report.policy_errors
        );
        let mut stopped: Vec<u64> = report.preempted.iter().map(|p| p.job.0).collect();
        let mut started: Vec<u64> = report.starts.iter().map(|s| s.job.0).collect();
        stopped.sort_unstable();
        started.sort_unstable();
        (
            began,
            stopped,
            started,
            sched.held_of_type(va, a100),
            sched.held_of_type(vb, a100),
        )
    };
    let native = run(Box::new(Native::new(
        "quota-reclaim",
        gangway_policy_quota_reclaim::QuotaReclaim::default(),
    )));
    assert_eq!(native, (vec![1, 2, 3, 4], vec![2], vec![5], 8, 8));
    let engine = gangway_core::wasm::PolicyEngine::new(Default::default()).unwrap();
    let bytes = gangway_plugin_artifacts::module("quota-reclaim").expect("the module");
    let module = engine.load("quota-reclaim", bytes).unwrap();
    let wasm = run(module.backend::<Reclaim>(b"").unwrap());
    assert_eq!(wasm, native, "the module decides as the native policy");
}
