//! Running the checks on generated views, and what a failure says.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use gangway_plugin_sdk::{Slot, wire};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use gangway_plugin_sdk::testing::SlotViews;

use super::{Options, scenario};
use crate::policy::{BoxedBackend, PolicyError, PolicyErrorKind};
use gangway_plugin_sdk::SlotContract;

/// What a policy did in a passed check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The policy (or module) name.
    pub policy: String,
    /// The slot checked.
    pub slot: Slot,
    /// SlotViews it was given.
    pub views: usize,
    /// Calls made (determinism re-calls included).
    pub calls: usize,
    /// The slowest call, in microseconds.
    pub slowest_us: u128,
    /// The most jobs in one view.
    pub max_jobs: usize,
    /// Scheduler scenarios run, and their rounds.
    pub scenarios: usize,
    /// Rounds of those scenarios.
    pub rounds: usize,
}

/// Which rule a policy broke.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FindingKind {
    /// Its configuration was refused (or a fresh instance could not be made).
    Config(String),
    /// A call failed: a trap, an exhausted budget, a refusal, a reply that
    /// does not decode (or, natively, a panic).
    Failed(PolicyErrorKind),
    /// The answer broke the contract.
    Invalid(PolicyErrorKind),
    /// The same view got another answer: asked again, or by a fresh instance.
    Nondeterministic {
        /// Whether the other answer came from a fresh instance.
        fresh: bool,
    },
    /// A call took longer than the options allow for its view.
    TooSlow {
        /// What it took, in microseconds.
        took_us: u128,
        /// What was allowed.
        allowed_us: u128,
        /// Jobs of the view.
        jobs: usize,
    },
    /// A scheduler scenario broke: a policy error made the round fall back,
    /// or (never, unless the core has a bug) an invariant broke.
    Scenario(String),
    /// With liveness on: a job that fits the cluster never started.
    Liveness(String),
    /// The whole check took longer than [`super::Options::time_limit`].
    OutOfTime(Duration),
}

/// A broken rule, with the smallest view that shows it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{slot} policy {policy}: {}{}", describe(.kind), reproduce(.view))]
pub struct Finding {
    /// The slot.
    pub slot: Slot,
    /// The policy (or module) name.
    pub policy: String,
    /// What went wrong.
    pub kind: FindingKind,
    /// The smallest failing view as a line of Rust (decoding its bytes),
    /// to paste into a regression test; `None` for scenario failures.
    pub view: Option<String>,
}

impl Finding {
    pub(crate) fn config(slot: Slot, policy: &str, message: &str) -> Finding {
        Finding {
            slot,
            policy: policy.to_string(),
            kind: FindingKind::Config(message.to_string()),
            view: None,
        }
    }
}

fn describe(kind: &FindingKind) -> String {
    match kind {
        FindingKind::Config(m) => format!("cannot be made: {m}"),
        FindingKind::Failed(k) => format!("a call failed: {k}"),
        FindingKind::Invalid(k) => format!("an answer breaks the contract: {k}"),
        FindingKind::Nondeterministic { fresh: false } => {
            "the same view got a different answer when asked again; decisions must be a pure \
             function of the view"
                .into()
        }
        FindingKind::Nondeterministic { fresh: true } => {
            "a fresh instance answered the same view differently; decisions must be a pure \
             function of the view"
                .into()
        }
        FindingKind::TooSlow {
            took_us,
            allowed_us,
            jobs,
        } => format!(
            "a call over {jobs} jobs took {took_us} us, more than the {allowed_us} us allowed"
        ),
        FindingKind::Scenario(m) => format!("in a scheduler scenario: {m}"),
        FindingKind::Liveness(m) => format!("liveness: {m}"),
        FindingKind::OutOfTime(d) => format!("the check took more than {d:?}"),
    }
}

fn reproduce(view: &Option<String>) -> String {
    match view {
        Some(v) => format!("\n  smallest failing view (paste into a test):\n  {v}"),
        None => String::new(),
    }
}

/// The Rust line that rebuilds `view` of slot `S`.
fn repro<S: SlotViews>(view: &S::View) -> String {
    let bytes = wire::encode_view::<S>(view);
    // The marker type's name: the slot's name, capitalised.
    let mut slot = S::NAME.to_string();
    slot[..1].make_ascii_uppercase();
    format!(
        "let view = gangway_plugin_sdk::wire::decode_view::<gangway_plugin_sdk::{slot}>(&{bytes:?}).unwrap();"
    )
}

/// What the runner keeps between views.
struct State<S: SlotContract> {
    backend: BoxedBackend<S>,
    report: Report,
    /// The failure behind the test case that failed, in full.
    failure: Option<FindingKind>,
}

/// Checks slot `S` of the policy `factory` makes (a fresh instance per
/// call), on generated views and in scheduler scenarios.
pub fn check<S: SlotContract + SlotViews>(
    name: &str,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
    options: &Options,
) -> Result<Report, Finding> {
    let state = RefCell::new(State {
        backend: factory()?,
        report: Report {
            policy: name.to_string(),
            slot: S::SLOT,
            views: 0,
            calls: 0,
            slowest_us: 0,
            max_jobs: 0,
            scenarios: 0,
            rounds: 0,
        },
        failure: None,
    });
    let factory = RefCell::new(factory);
    let started = Instant::now();
    let shrink = options.time_limit.map_or(Duration::from_secs(20), |l| {
        (l / 3).min(Duration::from_secs(20))
    });
    let config = Config {
        cases: options.cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        max_shrink_time: u32::try_from(shrink.as_millis()).unwrap_or(u32::MAX),
        ..Config::default()
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&options.seed.to_le_bytes());
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let out_of_time = std::cell::Cell::new(false);
    let result = runner.run(&S::views(), |view| {
        if options.time_limit.is_some_and(|l| started.elapsed() > l) {
            out_of_time.set(true);
            return Err(TestCaseError::reject("out of time"));
        }
        let mut st = state.borrow_mut();
        let outcome = one_view::<S>(&mut st, &view, options, || (factory.borrow_mut())());
        st.report.views += 1;
        match outcome {
            Ok(()) => Ok(()),
            Err(kind) => {
                st.failure = Some(kind.clone());
                // A failed call discards nothing here: the next case starts
                // on a fresh instance, as a scheduler would.
                if let Ok(b) = (factory.borrow_mut())() {
                    st.backend = b;
                }
                Err(TestCaseError::fail(describe(&kind)))
            }
        }
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, view)) => {
            let kind =
                state.borrow_mut().failure.take().unwrap_or_else(|| {
                    FindingKind::Failed(PolicyErrorKind::Trap(reason.to_string()))
                });
            return Err(Finding {
                slot: S::SLOT,
                policy: name.to_string(),
                kind,
                view: Some(repro::<S>(&view)),
            });
        }
        Err(TestError::Abort(_)) if out_of_time.get() => {
            return Err(Finding {
                slot: S::SLOT,
                policy: name.to_string(),
                kind: FindingKind::OutOfTime(options.time_limit.unwrap_or_default()),
                view: None,
            });
        }
        Err(TestError::Abort(reason)) => {
            return Err(Finding {
                slot: S::SLOT,
                policy: name.to_string(),
                kind: FindingKind::Failed(PolicyErrorKind::Trap(reason.to_string())),
                view: None,
            });
        }
    }
    let mut report = state.into_inner().report;
    let factory = factory.into_inner();
    let (scenarios, rounds) = scenario::run::<S>(name, factory, options)?;
    report.scenarios = scenarios;
    report.rounds = rounds;
    Ok(report)
}

/// Every per-view check of one view.
fn one_view<S: SlotContract + SlotViews>(
    st: &mut State<S>,
    view: &S::View,
    options: &Options,
    fresh: impl FnOnce() -> Result<BoxedBackend<S>, Finding>,
) -> Result<(), FindingKind> {
    let jobs = S::view_jobs(view);
    st.report.max_jobs = st.report.max_jobs.max(jobs);
    let allowed: Duration = options.time_base + options.time_per_job * jobs as u32;
    let call = |backend: &mut BoxedBackend<S>, report: &mut Report| {
        let started = Instant::now();
        let answer = backend.decide(view);
        let took = started.elapsed();
        report.calls += 1;
        report.slowest_us = report.slowest_us.max(took.as_micros());
        (answer, took)
    };
    let (first, took) = call(&mut st.backend, &mut st.report);
    let first = first.map_err(|e: PolicyError| FindingKind::Failed(e.kind))?;
    S::validate(view, &first).map_err(|e| FindingKind::Invalid(e.into()))?;
    if took > allowed {
        return Err(FindingKind::TooSlow {
            took_us: took.as_micros(),
            allowed_us: allowed.as_micros(),
            jobs,
        });
    }
    let (again, _) = call(&mut st.backend, &mut st.report);
    if again.map_err(|e| FindingKind::Failed(e.kind))? != first {
        return Err(FindingKind::Nondeterministic { fresh: false });
    }
    if st.report.views.is_multiple_of(16) {
        let mut other = fresh().map_err(|f| match f.kind {
            FindingKind::Config(m) => FindingKind::Config(m),
            other => other,
        })?;
        let (answer, _) = call(&mut other, &mut st.report);
        if answer.map_err(|e| FindingKind::Failed(e.kind))? != first {
            return Err(FindingKind::Nondeterministic { fresh: true });
        }
    }
    Ok(())
}
