//! What a check reports: a passed check's [`Report`], or a [`Finding`]
//! that names the broken rule and reproduces it on the smallest failing
//! view.

use std::time::Duration;

use gangway_plugin_sdk::Slot;

use crate::policy::PolicyErrorKind;

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
    /// Of those, calls made with the GPU types (contract 2.2), for a policy
    /// whose manifest takes them in a slot shown types (fairness, reclaim).
    pub typed_calls: usize,
    /// The slowest call, in microseconds.
    pub slowest_us: u128,
    /// The most jobs in one view.
    pub max_jobs: usize,
    /// Calls of the history check (see [`super::Options::history`]).
    pub history: usize,
    /// Scheduler scenarios run, and their rounds.
    pub scenarios: usize,
    /// Rounds of those scenarios.
    pub rounds: usize,
}

impl Report {
    /// A report of no calls yet, of slot `S`'s policy `name`.
    pub(crate) fn empty<S: gangway_plugin_sdk::SlotContract>(name: &str) -> Report {
        Report {
            policy: name.to_string(),
            slot: S::SLOT,
            views: 0,
            calls: 0,
            typed_calls: 0,
            slowest_us: 0,
            max_jobs: 0,
            history: 0,
            scenarios: 0,
            rounds: 0,
        }
    }
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
    /// Asked again after a long history of calls on the same instance, a
    /// view got another answer than the first time: its answers depend on
    /// what the instance saw before.
    HistoryDependent {
        /// The calls the instance had answered when it answered otherwise.
        calls: usize,
    },
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
    /// For a failure of a typed call (contract 2.2), the GPU types beside
    /// the view, as a line of Rust (decoding their bytes); `None` for a
    /// plain call.
    pub types: Option<String>,
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

    /// For a failure of a typed call (contract 2.2), the GPU types beside
    /// the smallest failing view, as a line of Rust.
    pub fn types(&self) -> Option<&str> {
        self.repro.as_ref().and_then(|r| r.types.as_deref())
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
    /// through [`super::check_view`] ([`super::check_typed_view`] for a
    /// typed call). `None` for a failure without a view.
    pub fn regression_test(&self) -> Option<String> {
        let repro = self.repro.as_ref()?;
        let marker = marker(self.slot);
        let answered = match &repro.decision {
            Some(d) => format!("    // It answered: {d}\n"),
            None => String::new(),
        };
        let (types, check) = match &repro.types {
            Some(t) => (format!("    {t}\n"), "check_typed_view"),
            None => (String::new(), "check_view"),
        };
        let args = if repro.types.is_some() {
            "&view, &types"
        } else {
            "&view"
        };
        Some(format!(
            "#[test]\n\
             fn smallest_failing_{slot}_view() {{\n\
             \x20   {view}\n\
             {types}\
             {answered}\
             \x20   let policy = {maker};\n\
             \x20   gangway_core::conformance::{check}::<gangway_plugin_sdk::{marker}>(policy, {args}).unwrap();\n\
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

pub(crate) fn describe(kind: &FindingKind) -> String {
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
        FindingKind::HistoryDependent { calls } => format!(
            "after {calls} calls on one instance it answered a view otherwise than the first \
             time; decisions must be a pure function of the view, whatever the instance saw \
             before"
        ),
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

/// The maker of a policy value given to the kit, of type `P`.
pub(crate) fn given_maker<P>(name: &str) -> String {
    format!(
        "Box::new(gangway_core::policy::Native::new({name:?}, your_policy() /* -> {}, as given to the kit */))",
        std::any::type_name::<P>()
    )
}
