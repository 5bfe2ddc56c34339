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
#[error("{slot} policy {policy}: {}{}", describe(.kind), reproduce(self))]
pub struct Finding {
    /// The slot.
    pub slot: Slot,
    /// The policy (or module) name.
    pub policy: String,
    /// What went wrong.
    pub kind: FindingKind,
    /// The smallest failing view and how to check it again; `None` for a
    /// failure without a view (a scenario, a configuration).
    pub repro: Option<Box<Repro>>,
}

/// What reproduces a [`Finding`]: the smallest failing view, what the policy
/// answered on it, and how to make the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repro {
    /// The view as a line of Rust (decoding its bytes).
    pub view: String,
    /// What the policy answered on it (its `Debug` form), if it answered.
    pub decision: Option<String>,
    /// A Rust expression that makes the policy as a `BoxedBackend` of the
    /// slot: exact for a module and for a policy built from its default
    /// configuration; for a policy value given to the kit, a call to a
    /// `your_policy()` for the test's author to write, its type named.
    pub maker: String,
}

impl Finding {
    pub(crate) fn config(slot: Slot, policy: &str, message: &str) -> Finding {
        Finding {
            slot,
            policy: policy.to_string(),
            kind: FindingKind::Config(message.to_string()),
            repro: None,
        }
    }

    /// The smallest failing view as a line of Rust, to paste into a test.
    pub fn view(&self) -> Option<&str> {
        self.repro.as_ref().map(|r| r.view.as_str())
    }

    /// The same finding, its regression test making the policy with
    /// `maker` (a Rust expression of type `BoxedBackend<S>`), as
    /// `policy-check` does with the module's path and configuration file.
    #[must_use]
    pub fn with_maker(mut self, maker: impl Into<String>) -> Finding {
        if let Some(r) = &mut self.repro {
            r.maker = maker.into();
        }
        self
    }

    /// A complete test that fails as the policy failed, on the smallest
    /// failing view: the view, what the policy answered, and the check
    /// through [`super::check_view`]. `None` for a failure without a view.
    pub fn regression_test(&self) -> Option<String> {
        let repro = self.repro.as_ref()?;
        let marker = marker(self.slot);
        let answered = match &repro.decision {
            Some(d) => format!("    // It answered: {d}\n"),
            None => String::new(),
        };
        Some(format!(
            "#[test]\n\
             fn smallest_failing_{slot}_view() {{\n\
             \x20   {view}\n\
             {answered}\
             \x20   let policy = {maker};\n\
             \x20   gangway_core::conformance::check_view::<gangway_plugin_sdk::{marker}>(policy, &view).unwrap();\n\
             }}",
            slot = self.slot,
            view = repro.view,
            maker = repro.maker,
        ))
    }
}

/// The SDK's marker type of `slot`: its name, capitalised.
pub(crate) fn marker(slot: Slot) -> String {
    let mut name = slot.as_str().to_string();
    name[..1].make_ascii_uppercase();
    name
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

fn reproduce(finding: &Finding) -> String {
    match finding.regression_test() {
        Some(test) => {
            format!("\n  smallest failing view, as a regression test to paste:\n\n{test}")
        }
        None => String::new(),
    }
}

/// The Rust line that rebuilds `view` of slot `S`.
fn repro<S: SlotViews>(view: &S::View) -> String {
    let bytes = wire::encode_view::<S>(view);
    format!(
        "let view = gangway_plugin_sdk::wire::decode_view::<gangway_plugin_sdk::{}>(&{bytes:?}).unwrap();",
        marker(S::SLOT)
    )
}

/// The maker of a policy value given to the kit, of type `P`.
pub(crate) fn given_maker<P>(name: &str) -> String {
    format!(
        "Box::new(gangway_core::policy::Native::new({name:?}, your_policy() /* -> {}, as given to the kit */))",
        std::any::type_name::<P>()
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
/// call), on generated views and in scheduler scenarios. A failing view is
/// shrunk, by proptest and then by the slot's one step smaller views
/// ([`SlotViews::smaller`]), to the smallest that fails the same way.
pub fn check<S: SlotContract + SlotViews>(
    name: &str,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
    options: &Options,
) -> Result<Report, Finding> {
    let state = RefCell::new(State {
        backend: factory()?,
        report: empty_report::<S>(name),
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
            let factory = factory.into_inner();
            let (view, kind) = smallest::<S>(name, view, kind, factory, options, shrink);
            let decision = factory()
                .ok()
                .and_then(|mut b| b.decide(&view).ok())
                .map(|d| format!("{d:?}"));
            return Err(Finding {
                slot: S::SLOT,
                policy: name.to_string(),
                kind,
                repro: Some(Box::new(Repro {
                    view: repro::<S>(&view),
                    decision,
                    maker: format!(
                        "Box::new(gangway_core::policy::Native::new({name:?}, your_policy()))"
                    ),
                })),
            });
        }
        Err(TestError::Abort(_)) if out_of_time.get() => {
            return Err(Finding {
                kind: FindingKind::OutOfTime(options.time_limit.unwrap_or_default()),
                ..Finding::config(S::SLOT, name, "")
            });
        }
        Err(TestError::Abort(reason)) => {
            return Err(Finding {
                kind: FindingKind::Failed(PolicyErrorKind::Trap(reason.to_string())),
                ..Finding::config(S::SLOT, name, "")
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

/// A report of no calls yet.
fn empty_report<S: SlotContract>(name: &str) -> Report {
    Report {
        policy: name.to_string(),
        slot: S::SLOT,
        views: 0,
        calls: 0,
        slowest_us: 0,
        max_jobs: 0,
        scenarios: 0,
        rounds: 0,
    }
}

/// What a finding says without its numbers (ids, counts, times): two
/// failures with the same signature broke the same rule the same way.
fn signature(kind: &FindingKind) -> String {
    describe(kind)
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect()
}

/// Shrinks failing `view` further, greedily: the first of the slot's one
/// step smaller views that fails the same way (the same [`signature`], on a
/// fresh instance) replaces it, until none does or `budget` runs out.
fn smallest<S: SlotContract + SlotViews>(
    name: &str,
    mut view: S::View,
    mut kind: FindingKind,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
    options: &Options,
    budget: Duration,
) -> (S::View, FindingKind) {
    let started = Instant::now();
    let same = signature(&kind);
    'smaller: loop {
        for candidate in S::smaller(&view) {
            if started.elapsed() > budget {
                break 'smaller;
            }
            let Ok(backend) = factory() else {
                break 'smaller;
            };
            let mut st = State {
                backend,
                report: empty_report::<S>(name),
                failure: None,
            };
            if let Err(k) = one_view::<S>(&mut st, &candidate, options, &mut *factory)
                && signature(&k) == same
            {
                (view, kind) = (candidate, k);
                continue 'smaller;
            }
        }
        break;
    }
    (view, kind)
}

/// Checks one view as the kit does, for a regression test: `backend`
/// answers it, the answer must pass the slot's rules, and the same view
/// asked again must get the same answer. Returns the decision.
///
/// ```
/// use gangway_core::conformance::check_view;
/// use gangway_core::policy::Native;
/// use gangway_plugin_sdk::{Fairness, FairnessView, FifoQuota};
///
/// let decision = check_view::<Fairness>(Box::new(Native::new("fifo", FifoQuota)), &FairnessView::default()).unwrap();
/// assert!(decision.order.is_empty());
/// ```
pub fn check_view<S: SlotContract>(
    mut backend: BoxedBackend<S>,
    view: &S::View,
) -> Result<S::Decision, Finding> {
    let fail = |backend: &BoxedBackend<S>, kind| Finding {
        kind,
        ..Finding::config(S::SLOT, backend.name(), "")
    };
    let first = match backend.decide(view) {
        Ok(d) => d,
        Err(e) => return Err(fail(&backend, FindingKind::Failed(e.kind))),
    };
    if let Err(e) = S::validate(view, &first) {
        return Err(fail(&backend, FindingKind::Invalid(e.into())));
    }
    match backend.decide(view) {
        Ok(again) if again == first => Ok(first),
        Ok(_) => Err(fail(
            &backend,
            FindingKind::Nondeterministic { fresh: false },
        )),
        Err(e) => Err(fail(&backend, FindingKind::Failed(e.kind))),
    }
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
