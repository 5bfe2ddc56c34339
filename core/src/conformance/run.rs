//! Running the checks on generated views, shrinking a failure to the
//! smallest view that fails the same way.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gangway_plugin_sdk::{Manifest, wire};
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::testing::types::{TypesPlan, types_plan};

use super::finding::{Finding, FindingKind, Report, Repro, describe, marker};
use super::typed::{repro_types, typed_call, typed_checks};
use super::{Options, scenario};
use crate::policy::{
    Backend, BoxedBackend, PolicyError, PolicyErrorKind, PolicyOrigin, ViewChanges,
};
use gangway_plugin_sdk::SlotContract;

/// The Rust line that rebuilds `view` of slot `S`.
fn repro<S: SlotViews>(view: &S::View) -> String {
    let bytes = wire::encode_view::<S>(view);
    format!(
        "let view = gangway_plugin_sdk::wire::decode_view::<gangway_plugin_sdk::{}>(&{bytes:?}).unwrap();",
        marker(S::SLOT)
    )
}

/// One generated case: a view, and for a policy that takes the GPU types
/// the plan of the types beside it (made from the view with
/// [`SlotViews::types_of`]).
type Case<S> = (<S as SlotContract>::View, Option<TypesPlan>);

/// The generated cases of a check: the slot's views, each with a plan of
/// GPU types when the policy takes them (the views are the same either
/// way: they are drawn first).
fn cases<S: SlotContract + SlotViews>(takes_types: bool) -> BoxedStrategy<Case<S>> {
    if takes_types {
        (S::views(), types_plan())
            .prop_map(|(view, plan)| (view, Some(plan)))
            .boxed()
    } else {
        S::views().prop_map(|view| (view, None)).boxed()
    }
}

/// What the runner keeps between views.
struct State<S: SlotContract> {
    backend: BoxedBackend<S>,
    report: Report,
    /// The failure behind the test case that failed, in full.
    failure: Option<FindingKind>,
    /// Views answered, with their first answers (at most [`SEEN`]).
    seen: Vec<(S::View, S::Decision)>,
}

/// How many answered views the history asks again.
const SEEN: usize = 256;

/// Checks slot `S` of the policy `factory` makes (a fresh instance per
/// call), on generated views and in scheduler scenarios. A failing view is
/// shrunk, by proptest and then by the slot's one step smaller views
/// ([`SlotViews::smaller`]), to the smallest that fails the same way.
pub fn check<S: SlotContract + SlotViews>(
    name: &str,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
    options: &Options,
) -> Result<Report, Finding> {
    let backend = factory()?;
    let takes_types = backend.manifest().gpu_types;
    let state = RefCell::new(State {
        backend,
        report: Report::empty::<S>(name),
        failure: None,
        seen: Vec::new(),
    });
    let factory = RefCell::new(factory);
    let started = Instant::now();
    let shrink = options.time_limit.map_or(Duration::from_secs(20), |l| {
        (l / 3).min(Duration::from_secs(20))
    });
    let out_of_time = std::cell::Cell::new(false);
    let result = runner(options, shrink).run(&cases::<S>(takes_types), |(view, plan)| {
        if options.time_limit.is_some_and(|l| started.elapsed() > l) {
            out_of_time.set(true);
            return Err(TestCaseError::reject("out of time"));
        }
        let mut st = state.borrow_mut();
        let outcome = one_view::<S>(&mut st, &view, plan.as_ref(), options, || {
            (factory.borrow_mut())()
        });
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
    let st = match result {
        Ok(()) => state.into_inner(),
        Err(error) => {
            let failed = Failed {
                error,
                kind: state.borrow_mut().failure.take(),
                out_of_time: out_of_time.get(),
                shrink,
            };
            return Err(failed.finding::<S>(name, factory.into_inner(), options));
        }
    };
    after_views::<S>(name, st, options, started)
}

/// The checks after the generated views: the history, then the scenarios,
/// on the instance that answered the views; the report of the whole check.
fn after_views<S: SlotContract + SlotViews>(
    name: &str,
    mut st: State<S>,
    options: &Options,
    started: Instant,
) -> Result<Report, Finding> {
    history::<S>(&mut st, options, started).map_err(|(kind, view)| Finding {
        slot: S::SLOT,
        policy: name.to_string(),
        kind,
        repro: view.map(|v| {
            Box::new(Repro {
                view: repro::<S>(&v),
                types: None,
                decision: None,
                maker: your_policy(name),
            })
        }),
    })?;
    // The same instance, with its history, in every scenario.
    let shared = Shared {
        name: st.backend.name().to_string(),
        backend: Arc::new(Mutex::new(st.backend)),
    };
    let (scenarios, rounds) = scenario::run::<S>(
        name,
        &mut || Ok(Box::new(shared.clone()) as BoxedBackend<S>),
        options,
    )?;
    let mut report = st.report;
    report.scenarios = scenarios;
    report.rounds = rounds;
    Ok(report)
}

/// The history check (see [`Options::history`]): the instance that answered
/// the generated views is asked them again, and the slot's largest views,
/// for `options.history` calls; each answer must be that view's first.
/// A failure comes with the view that showed it.
fn history<S: SlotContract + SlotViews>(
    st: &mut State<S>,
    options: &Options,
    started: Instant,
) -> Result<(), (FindingKind, Option<S::View>)> {
    if options.history == 0 || st.seen.is_empty() {
        return Ok(());
    }
    let mut runner = runner(options, Duration::ZERO);
    let largest: Vec<S::View> = (0..LARGEST)
        .filter_map(|_| S::largest().new_tree(&mut runner).ok().map(|t| t.current()))
        .collect();
    for view in largest {
        let answer = st
            .backend
            .decide(&view)
            .map_err(|e| (FindingKind::Failed(e.kind), Some(view.clone())))?;
        S::validate(&view, &answer)
            .map_err(|e| (FindingKind::Invalid(e.into()), Some(view.clone())))?;
        st.report.calls += 1;
        st.report.max_jobs = st.report.max_jobs.max(S::view_jobs(&view));
        st.seen.push((view, answer));
    }
    for call in 0..options.history as usize {
        if options.time_limit.is_some_and(|l| started.elapsed() > l) {
            return Err((
                FindingKind::OutOfTime(options.time_limit.unwrap_or_default()),
                None,
            ));
        }
        let (view, first) = &st.seen[call % st.seen.len()];
        let answer = st
            .backend
            .decide(view)
            .map_err(|e| (FindingKind::Failed(e.kind), Some(view.clone())))?;
        st.report.calls += 1;
        st.report.history += 1;
        if answer != *first {
            let calls = st.report.calls;
            return Err((FindingKind::HistoryDependent { calls }, Some(view.clone())));
        }
    }
    Ok(())
}

/// How many of the slot's largest views the history asks.
const LARGEST: usize = 4;

/// One backend shared by the scenarios of a check, so a policy's instance
/// keeps its history from one to the next.
struct Shared<S: SlotContract> {
    name: String,
    backend: Arc<Mutex<BoxedBackend<S>>>,
}

impl<S: SlotContract> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared {
            name: self.name.clone(),
            backend: self.backend.clone(),
        }
    }
}

impl<S: SlotContract> Shared<S> {
    fn with<R>(&self, f: impl FnOnce(&mut BoxedBackend<S>) -> R) -> R {
        let mut backend = self
            .backend
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut backend)
    }
}

impl<S: SlotContract> Backend<S> for Shared<S> {
    fn name(&self) -> &str {
        &self.name
    }
    fn decide(&mut self, view: &S::View) -> Result<S::Decision, PolicyError> {
        self.with(|b| b.decide(view))
    }
    fn decide_with_changes(
        &mut self,
        view: &S::View,
        changes: &ViewChanges<'_>,
    ) -> Result<S::Decision, PolicyError> {
        self.with(|b| b.decide_with_changes(view, changes))
    }
    fn decide_typed(
        &mut self,
        view: &S::View,
        types: &gangway_plugin_sdk::TypesView,
        changes: &ViewChanges<'_>,
    ) -> Result<(S::Decision, gangway_plugin_sdk::TypeChoices), PolicyError> {
        self.with(|b| b.decide_typed(view, types, changes))
    }
    fn manifest(&self) -> Manifest {
        self.with(|b| b.manifest())
    }
    fn prepare_round(&mut self) {
        self.with(|b| b.prepare_round());
    }
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        self.with(|b| b.report(outcome));
    }
    fn origin(&self) -> PolicyOrigin {
        self.with(|b| b.origin())
    }
    fn is_noop(&self) -> bool {
        self.with(|b| b.is_noop())
    }
}

/// The view generator of a check: `options.cases` views from
/// `options.seed`, shrinking a failure for at most `shrink`.
fn runner(options: &Options, shrink: Duration) -> TestRunner {
    let config = Config {
        cases: options.cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        max_shrink_time: u32::try_from(shrink.as_millis()).unwrap_or(u32::MAX),
        ..Config::default()
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&options.seed.to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

/// How the generated views of a check failed.
struct Failed<V> {
    /// What the runner reported (the shrunk view, for a failure).
    error: TestError<V>,
    /// The failure behind it, in full, if a view failed.
    kind: Option<FindingKind>,
    /// Whether the check ran out of time.
    out_of_time: bool,
    /// How long shrinking may take further.
    shrink: Duration,
}

impl<V> Failed<(V, Option<TypesPlan>)> {
    /// The finding: for a failed view, shrunk further to the smallest that
    /// fails the same way, with what the policy answered on it.
    fn finding<S: SlotContract<View = V> + SlotViews>(
        self,
        name: &str,
        factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
        options: &Options,
    ) -> Finding {
        match self.error {
            TestError::Fail(reason, case) => {
                let kind = self.kind.unwrap_or_else(|| {
                    FindingKind::Failed(PolicyErrorKind::Trap(reason.to_string()))
                });
                let (case, kind) = smallest::<S>(name, case, kind, factory, options, self.shrink);
                Finding {
                    slot: S::SLOT,
                    policy: name.to_string(),
                    repro: Some(Box::new(case_repro::<S>(name, &case, factory))),
                    kind,
                }
            }
            TestError::Abort(_) if self.out_of_time => Finding {
                kind: FindingKind::OutOfTime(options.time_limit.unwrap_or_default()),
                ..Finding::config(S::SLOT, name, "")
            },
            TestError::Abort(reason) => Finding {
                kind: FindingKind::Failed(PolicyErrorKind::Trap(reason.to_string())),
                ..Finding::config(S::SLOT, name, "")
            },
        }
    }
}

/// What reproduces the failure of `case`: the view, and the GPU types
/// beside it if the typed call failed (the plain checks pass on a fresh
/// instance), with what a fresh instance answers there.
fn case_repro<S: SlotContract + SlotViews>(
    name: &str,
    (view, plan): &Case<S>,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
) -> Repro {
    let types = plan.as_ref().and_then(|p| S::types_of(view, p));
    let mut out = Repro {
        view: repro::<S>(view),
        types: None,
        decision: None,
        maker: your_policy(name),
    };
    let plain_passes = types.is_some()
        && factory()
            .ok()
            .is_some_and(|b| super::check_view::<S>(b, view).is_ok());
    match types {
        Some(types) if plain_passes => {
            out.decision = factory()
                .ok()
                .and_then(|mut b| typed_call::<S>(&mut b, view, &types).ok())
                .map(|answer| format!("{answer:?}"));
            out.types = Some(repro_types(&types));
        }
        _ => {
            out.decision = factory()
                .ok()
                .and_then(|mut b| b.decide(view).ok())
                .map(|d| format!("{d:?}"));
        }
    }
    out
}

/// The maker of a policy the kit knows only by `name`.
fn your_policy(name: &str) -> String {
    format!("Box::new(gangway_core::policy::Native::new({name:?}, your_policy()))")
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
    mut case: Case<S>,
    mut kind: FindingKind,
    factory: &mut dyn FnMut() -> Result<BoxedBackend<S>, Finding>,
    options: &Options,
    budget: Duration,
) -> (Case<S>, FindingKind) {
    let started = Instant::now();
    let same = signature(&kind);
    'smaller: loop {
        for candidate in smaller_cases::<S>(&case) {
            if started.elapsed() > budget {
                break 'smaller;
            }
            let Ok(backend) = factory() else {
                break 'smaller;
            };
            let mut st = State {
                backend,
                report: Report::empty::<S>(name),
                failure: None,
                seen: Vec::new(),
            };
            let (view, plan) = &candidate;
            if let Err(k) = one_view::<S>(&mut st, view, plan.as_ref(), options, &mut *factory)
                && signature(&k) == same
            {
                (case, kind) = (candidate, k);
                continue 'smaller;
            }
        }
        break;
    }
    (case, kind)
}

/// Cases one step smaller than `case`: its view one step smaller (the
/// types made again from the same plan), then its plan one step simpler.
fn smaller_cases<S: SlotContract + SlotViews>((view, plan): &Case<S>) -> Vec<Case<S>> {
    let views = S::smaller(view).into_iter().map(|v| (v, *plan));
    let plans = plan
        .iter()
        .flat_map(TypesPlan::smaller)
        .map(|p| (view.clone(), Some(p)));
    views.chain(plans).collect()
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
    plan: Option<&TypesPlan>,
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
    // Contract 2.2: the same view with the GPU types beside it.
    let types = plan.and_then(|p| S::types_of(view, p));
    let typed = match &types {
        Some(types) => Some(typed_checks::<S>(
            &mut st.backend,
            &mut st.report,
            view,
            types,
            allowed,
        )?),
        None => None,
    };
    if st.seen.len() < SEEN {
        st.seen.push((view.clone(), first.clone()));
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
        if let (Some(types), Some(typed)) = (&types, typed) {
            st.report.calls += 1;
            st.report.typed_calls += 1;
            let answer = typed_call::<S>(&mut other, view, types);
            if answer.map_err(|e| FindingKind::Failed(e.kind))? != typed {
                return Err(FindingKind::Nondeterministic { fresh: true });
            }
        }
    }
    Ok(())
}
