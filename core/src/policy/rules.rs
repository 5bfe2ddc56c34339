//! What the core adds to each slot of the contract: how a decision is
//! checked against its view, the built-in policy, and where the slot sits in
//! a [`PolicySet`]. Implemented once per slot, in `policy/slots/`.

use gangway_plugin_sdk::SlotContract;

use super::PolicyErrorKind;
use super::backend::BoxedBackend;
use super::guard::Guarded;
use super::set::PolicySet;

/// A slot as the core runs it (see the module docs). Public so that tools
/// (e.g. `policy-check` and the conformance kit) apply exactly the round's
/// rules.
pub trait SlotRules: SlotContract {
    /// The name of the slot's built-in policy.
    const BUILTIN: &'static str;

    /// Checks a decision against the view it answers: the rules a policy
    /// must keep whatever the cluster's state (those that depend on it, e.g.
    /// that a reclaim frees room, are checked when the round applies it).
    fn validate(view: &Self::View, decision: &Self::Decision) -> Result<(), PolicyErrorKind>;

    /// The built-in policy: used when none is configured and when a
    /// configured one fails.
    fn builtin() -> BoxedBackend<Self>;

    /// The slot in a policy set.
    fn entry(set: &PolicySet) -> &Guarded<Self>;

    /// The slot in a policy set, mutably.
    fn entry_mut(set: &mut PolicySet) -> &mut Guarded<Self>;
}

/// An invalid-decision error.
pub(crate) fn invalid(msg: impl Into<String>) -> PolicyErrorKind {
    PolicyErrorKind::InvalidDecision(msg.into())
}
