//! The conformance kit's checks (every contract rule on generated views, and
//! scheduler scenarios with liveness) on this crate's policies at their defaults.
#![allow(clippy::unwrap_used)]

use gangway_core::conformance::{self, Options};
use gangway_plugin_sdk::*;

fn options() -> Options {
    Options {
        liveness: true,
        ..Options::default()
    }
}

#[test]
fn fairness_smallestfirst_conforms() {
    let report = conformance::defaults::<
        Fairness,
        gangway_policy_example_smallest_first::SmallestFirst,
    >(&options())
    .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}

/// What a failure looks like: a policy that forgets the last job of a queue
/// of three or more fails the kit, which names the broken rule and prints
/// the smallest failing view it could find as a line of Rust.
#[test]
fn a_broken_policy_fails_with_its_smallest_view() {
    use gangway_core::conformance::FindingKind;
    use gangway_plugin_sdk::{FairnessDecision, FairnessPolicy, FairnessView, Ranked};

    #[derive(Clone)]
    struct Forgetful;
    impl FairnessPolicy for Forgetful {
        fn order(&self, view: &FairnessView) -> FairnessDecision {
            let keep = if view.jobs.len() >= 3 {
                view.jobs.len() - 1
            } else {
                view.jobs.len()
            };
            FairnessDecision {
                order: view.jobs[..keep]
                    .iter()
                    .map(|j| Ranked {
                        job: j.id,
                        eligible: true,
                    })
                    .collect(),
            }
        }
    }
    let failure = conformance::policy::<Fairness>(Forgetful, &Options::quick()).unwrap_err();
    assert!(
        matches!(&failure.kind, FindingKind::Invalid(k) if k.to_string().contains("omits 1 of 3 pending jobs")),
        "shrunk to the smallest view: {failure}"
    );
    let text = failure.to_string();
    assert!(text.contains("an answer breaks the contract"), "{text}");
    let repro = failure.view().expect("the failing view");
    assert!(
        repro.starts_with(
            "let view = gangway_plugin_sdk::wire::decode_view::<gangway_plugin_sdk::Fairness>(&["
        ),
        "{repro}"
    );
    // The printed line really rebuilds a view of 3 jobs.
    let bytes: Vec<u8> = repro
        .split_once("(&[")
        .and_then(|(_, rest)| rest.split_once("])"))
        .map(|(list, _)| list.split(", ").map(|b| b.parse().unwrap()).collect())
        .unwrap();
    let view = gangway_plugin_sdk::wire::decode_view::<Fairness>(&bytes).unwrap();
    assert_eq!(view.jobs.len(), 3);
}

/// The bytes of the view line the kit prints
/// (`let view = ...decode_view::<...>(&[..]).unwrap();`).
fn view_bytes(line: &str) -> Vec<u8> {
    line.split_once("(&[")
        .and_then(|(_, rest)| rest.split_once("])"))
        .map(|(list, _)| list.split(", ").map(|b| b.parse().unwrap()).collect())
        .unwrap()
}

/// Shrinking reaches the smallest view: a policy that lists the first job
/// twice fails on any view of two jobs, and the kit brings the failing view
/// down to two jobs of one virtual cluster; it prints a complete regression
/// test, and the test's check fails as the kit did.
#[test]
fn a_failure_shrinks_to_the_smallest_view_and_prints_a_regression_test() {
    use gangway_core::conformance::FindingKind;
    use gangway_core::policy::Native;

    #[derive(Clone)]
    struct Twice;
    impl FairnessPolicy for Twice {
        fn order(&self, view: &FairnessView) -> FairnessDecision {
            let mut order: Vec<Ranked> = view
                .jobs
                .iter()
                .map(|j| Ranked {
                    job: j.id,
                    eligible: true,
                })
                .collect();
            if order.len() >= 2 {
                order[1] = order[0];
            }
            FairnessDecision { order }
        }
    }
    let failure = conformance::policy::<Fairness>(Twice, &Options::quick()).unwrap_err();
    assert!(matches!(failure.kind, FindingKind::Invalid(_)), "{failure}");
    let view =
        gangway_plugin_sdk::wire::decode_view::<Fairness>(&view_bytes(failure.view().unwrap()))
            .unwrap();
    assert_eq!((view.jobs.len(), view.vcs.len()), (2, 1), "{view:?}");

    let test = failure.regression_test().unwrap();
    assert!(
        test.starts_with("#[test]\nfn smallest_failing_fairness_view() {"),
        "{test}"
    );
    assert!(test.contains("// It answered: FairnessDecision"), "{test}");
    assert!(
        test.contains("gangway_core::conformance::check_view::<gangway_plugin_sdk::Fairness>(policy, &view).unwrap();"),
        "{test}"
    );
    assert!(failure.to_string().contains(&test));
    // What the test runs fails as the kit did.
    let again = conformance::check_view::<Fairness>(Box::new(Native::new("twice", Twice)), &view)
        .unwrap_err();
    assert_eq!(again.kind, failure.kind);
}
