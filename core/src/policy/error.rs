//! Typed policy failures.

use gangway_plugin_sdk::{InvalidDecision, Slot};
use serde::{Deserialize, Serialize};

/// What went wrong in a policy call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum PolicyErrorKind {
    /// The decision broke the contract (not a permutation, unknown or
    /// duplicate job, wrong length, impossible level, a reclaim or migration
    /// that would not make room).
    #[error("invalid decision: {0}")]
    InvalidDecision(String),
    /// The module trapped (including a Rust panic inside it).
    #[error("trapped: {0}")]
    Trap(String),
    /// The call used up its fuel budget.
    #[error("ran out of fuel (CPU budget of {0} units)")]
    OutOfFuel(u64),
    /// The call passed its wall-clock deadline.
    #[error("missed its deadline of {0} ms")]
    DeadlineExceeded(u64),
    /// The module tried to grow its memory past the instance's cap.
    #[error("hit its memory cap of {0} bytes")]
    MemoryLimit(u64),
    /// The reply bytes did not decode, or were longer than any answer to the
    /// view can be.
    #[error("reply does not decode: {0}")]
    Decode(String),
    /// The call broke the canonical ABI: a reply that cannot be lifted (a
    /// list or string out of bounds of the module's memory, a bad
    /// discriminant) or a bad allocation while the view was passed in.
    #[error("broke the component ABI: {0}")]
    Abi(String),
    /// The policy answered with an error of its own (`error(message)` in WIT).
    #[error("refused: {0}")]
    Refused(String),
    /// The module is quarantined after repeated failures.
    #[error("quarantined after {0} failures")]
    Quarantined(u32),
    /// The module used up the fuel it may use over its whole life in this
    /// slot ([`crate::wasm::SandboxConfig::fuel_per_backend`]): every
    /// further call fails at once.
    #[error("used up its fuel for the run or period ({0} units)")]
    RunBudget(u64),
    /// The module's `-buffered` twin and the slot's own function answered
    /// one view differently (contract 2.1 has them answer alike).
    #[error("its -buffered twin and the slot's function disagree: {0}")]
    TwinsDisagree(String),
    /// The module used more fuel than its work budget allows
    /// ([`crate::wasm::WorkBudget`]): over its recent calls, more than a
    /// multiple of what its slot's built-in policies cost on the same views.
    #[error(
        "used more than its work budget: {spent} fuel units over its last {window} calls, \
         {factor}x its slot's built-in policies allowing {allowed}"
    )]
    WorkBudget {
        /// What the window's calls used, this one included.
        spent: u64,
        /// What the window allowed.
        allowed: u64,
        /// The budget's factor.
        factor: u64,
        /// The budget's window, in calls.
        window: u32,
    },
    /// The module cost the host more than its round budget allows
    /// ([`crate::wasm::RoundBudget`]): over its last rounds, more fuel or
    /// wall-clock time than the bound, whatever its views.
    #[error(
        "used more than its round budget: {spent} {unit} over its last {rounds} rounds, \
         {allowed} allowed"
    )]
    RoundBudget {
        /// What the window's entries used, this one included.
        spent: u64,
        /// What the window allows.
        allowed: u64,
        /// Of what.
        unit: BudgetUnit,
        /// The budget's window, in rounds.
        rounds: u32,
    },
}

/// What a [`PolicyErrorKind::RoundBudget`] was spent in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BudgetUnit {
    /// Fuel units.
    Fuel,
    /// Milliseconds of wall-clock time.
    Time,
}

impl std::fmt::Display for BudgetUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BudgetUnit::Fuel => "fuel units",
            BudgetUnit::Time => "ms",
        })
    }
}

/// A failed policy call: which slot, which module, what happened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{slot} policy {module:?}: {kind}")]
pub struct PolicyError {
    /// The slot.
    pub slot: Slot,
    /// The module or policy name.
    pub module: String,
    /// What happened.
    pub kind: PolicyErrorKind,
}

impl PolicyError {
    /// Builds an error.
    pub fn new(slot: Slot, module: impl Into<String>, kind: PolicyErrorKind) -> PolicyError {
        PolicyError {
            slot,
            module: module.into(),
            kind,
        }
    }
}

impl From<InvalidDecision> for PolicyErrorKind {
    fn from(invalid: InvalidDecision) -> Self {
        PolicyErrorKind::InvalidDecision(invalid.into_reason())
    }
}

/// An invalid-decision error: a rule the round checks when it applies a
/// decision to its state (e.g. that a reclaim frees room).
pub(crate) fn invalid(msg: impl Into<String>) -> PolicyErrorKind {
    PolicyErrorKind::InvalidDecision(msg.into())
}
