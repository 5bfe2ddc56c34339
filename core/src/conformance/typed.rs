//! The typed calls of contract 2.2 in the kit: a policy whose manifest
//! takes the GPU types is also asked with them, on every generated view of
//! a slot shown types (fairness, reclaim), beside a generated types view
//! consistent with it ([`gangway_plugin_sdk::testing::types`]). Its reply
//! must pass every rule the core's guard checks on a typed reply: the
//! decision's rules, and type choices that name jobs of the view, each
//! once, each on one of the job's allowed types.

use std::time::{Duration, Instant};

use gangway_plugin_sdk::{SlotContract, TypeChoices, TypesView, wire};

use super::finding::{Finding, FindingKind, Report};
use crate::book::ChangeLog;
use crate::policy::{BoxedBackend, PolicyError, ViewChanges, check_choices, invalid};

/// A typed answer: the decision and the type choices.
pub(super) type TypedAnswer<S> = (<S as SlotContract>::Decision, TypeChoices);

/// Asks `backend` for its typed answer to `view` and `types`, as a round
/// does (with a change log of its own, which tells a module nothing it can
/// use: it is sent the view whole).
pub(super) fn typed_call<S: SlotContract>(
    backend: &mut BoxedBackend<S>,
    view: &S::View,
    types: &TypesView,
) -> Result<TypedAnswer<S>, PolicyError> {
    let log = ChangeLog::default();
    let changes = ViewChanges::new(&log, log.now());
    backend.decide_typed(view, types, &changes)
}

/// Whether a typed answer passes the guard's rules: the choices', then
/// the decision's.
pub(super) fn check_typed_answer<S: SlotContract>(
    view: &S::View,
    types: &TypesView,
    answer: Result<TypedAnswer<S>, PolicyError>,
) -> Result<TypedAnswer<S>, FindingKind> {
    let (decision, choices) = answer.map_err(|e| FindingKind::Failed(e.kind))?;
    check_choices(types, &choices)
        .map_err(|why| FindingKind::Invalid(invalid(format!("given the GPU types, it {why}"))))?;
    S::validate(view, &decision).map_err(|e| FindingKind::Invalid(e.into()))?;
    Ok((decision, choices))
}

/// The typed checks of one view: the answer passes the rules, within the
/// time `allowed`, and the same call again gets the same answer. Returns
/// the answer.
pub(super) fn typed_checks<S: SlotContract>(
    backend: &mut BoxedBackend<S>,
    report: &mut Report,
    view: &S::View,
    types: &TypesView,
    allowed: Duration,
) -> Result<TypedAnswer<S>, FindingKind> {
    let mut call = |backend: &mut BoxedBackend<S>| {
        let started = Instant::now();
        let answer = typed_call::<S>(backend, view, types);
        let took = started.elapsed();
        report.calls += 1;
        report.typed_calls += 1;
        report.slowest_us = report.slowest_us.max(took.as_micros());
        (answer, took)
    };
    let (first, took) = call(backend);
    let first = check_typed_answer::<S>(view, types, first)?;
    if took > allowed {
        return Err(FindingKind::TooSlow {
            took_us: took.as_micros(),
            allowed_us: allowed.as_micros(),
            jobs: S::view_jobs(view),
        });
    }
    let (again, _) = call(backend);
    if again.map_err(|e| FindingKind::Failed(e.kind))? != first {
        return Err(FindingKind::Nondeterministic { fresh: false });
    }
    Ok(first)
}

/// The Rust line that rebuilds `types`.
pub(super) fn repro_types(types: &TypesView) -> String {
    let mut bytes = Vec::new();
    wire::append_typed(types, &mut bytes);
    // The types' own bytes: without their length and the tag.
    bytes.truncate(bytes.len().saturating_sub(5));
    format!(
        "let types = gangway_plugin_sdk::wire::decode_typed::<gangway_plugin_sdk::TypesView>(&{bytes:?}).unwrap();"
    )
}

/// Checks one view with its GPU types as the kit does, for a regression
/// test: `backend` answers the typed call (contract 2.2), the answer must
/// pass the rules the core checks on a typed reply (the decision's, and
/// type choices naming jobs of `types`, each once, on one of its allowed
/// types), and the same call again must get the same answer. Returns the
/// answer.
///
/// ```
/// use gangway_core::conformance::check_typed_view;
/// use gangway_core::policy::Native;
/// use gangway_plugin_sdk::{Fairness, FairnessView, FifoQuota, TypesView};
///
/// let (decision, choices) = check_typed_view::<Fairness>(
///     Box::new(Native::new("fifo", FifoQuota)),
///     &FairnessView::default(),
///     &TypesView::default(),
/// )
/// .unwrap();
/// assert!(decision.order.is_empty() && choices.choices.is_empty());
/// ```
pub fn check_typed_view<S: SlotContract>(
    mut backend: BoxedBackend<S>,
    view: &S::View,
    types: &TypesView,
) -> Result<(S::Decision, TypeChoices), Finding> {
    let mut report = Report::empty::<S>(backend.name());
    typed_checks::<S>(&mut backend, &mut report, view, types, Duration::MAX).map_err(|kind| {
        Finding {
            kind,
            ..Finding::config(S::SLOT, backend.name(), "")
        }
    })
}
