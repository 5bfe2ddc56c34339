//! What the core adds to each slot of the contract: how a decision is
//! checked against its view, and the built-in policy. Implemented once per
//! slot, in `policy/slots/`; where a slot sits in a policy set is
//! [`super::SlotRules`], in `set.rs`.

use gangway_plugin_sdk::SlotContract;

use super::PolicyErrorKind;
use super::backend::BoxedBackend;

/// A slot's checks as the core applies them (see the module docs). Public
/// so that tools (e.g. `policy-check` and the conformance kit) apply exactly
/// the round's rules.
pub trait SlotCheck: SlotContract {
    /// The name of the slot's built-in policy.
    const BUILTIN: &'static str;

    /// Checks a decision against the view it answers: the rules a policy
    /// must keep whatever the cluster's state (those that depend on it, e.g.
    /// that a reclaim frees room, are checked when the round applies it).
    fn validate(view: &Self::View, decision: &Self::Decision) -> Result<(), PolicyErrorKind>;

    /// The built-in policy: used when none is configured and when a
    /// configured one fails.
    fn builtin() -> BoxedBackend<Self>;
}

/// An invalid-decision error.
pub(crate) fn invalid(msg: impl Into<String>) -> PolicyErrorKind {
    PolicyErrorKind::InvalidDecision(msg.into())
}
