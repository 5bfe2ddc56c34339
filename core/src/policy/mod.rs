//! The policy host side: the three slots, native and Wasm backends, decision
//! validation, failure handling and the built-in defaults.
//!
//! A backend answers one call per slot per round. Every answer is validated
//! ([`validate`]) before the scheduler uses it; any failure becomes a
//! [`PolicyError`] and the round falls back to the slot's built-in default.

pub mod defaults;
mod error;
pub mod validate;

use gangway_plugin_sdk::{
    FairnessDecision, FairnessPolicy, GangDecision, GangPolicy, LocalityDecision, LocalityPolicy,
    QueueView, RoundView,
};

pub use error::{PolicyError, PolicyErrorKind, Slot};

/// A fairness policy as the scheduler calls it: native or sandboxed, fallible.
pub trait FairnessBackend: Send {
    /// A name for reports and errors (a policy name or a module path).
    fn name(&self) -> &str;
    /// Orders the pending jobs of `view`.
    fn order(&mut self, view: &RoundView) -> Result<FairnessDecision, PolicyError>;
    /// Called once at the start of every round, before any slot is asked:
    /// the one point where a backend may change what it is (apply a staged
    /// hot swap, restore a previous module). The default does nothing.
    fn prepare_round(&mut self) {}
    /// Told the outcome of the call just made, after the core validated the
    /// decision: `Ok(())`, or the error the round fell back on. Lets a backend
    /// count failures that only validation sees. The default does nothing.
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        let _ = outcome;
    }
}

/// A locality policy as the scheduler calls it.
pub trait LocalityBackend: Send {
    /// A name for reports and errors.
    fn name(&self) -> &str;
    /// One spread limit per job of `view`.
    fn spread(&mut self, view: &QueueView) -> Result<LocalityDecision, PolicyError>;
    /// Called once at the start of every round, before any slot is asked:
    /// the one point where a backend may change what it is (apply a staged
    /// hot swap, restore a previous module). The default does nothing.
    fn prepare_round(&mut self) {}
    /// Told the outcome of the call just made, after the core validated the
    /// decision: `Ok(())`, or the error the round fell back on. Lets a backend
    /// count failures that only validation sees. The default does nothing.
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        let _ = outcome;
    }
}

/// A gang policy as the scheduler calls it.
pub trait GangBackend: Send {
    /// A name for reports and errors.
    fn name(&self) -> &str;
    /// One action per job of `view`.
    fn on_blocked(&mut self, view: &QueueView) -> Result<GangDecision, PolicyError>;
    /// Called once at the start of every round, before any slot is asked:
    /// the one point where a backend may change what it is (apply a staged
    /// hot swap, restore a previous module). The default does nothing.
    fn prepare_round(&mut self) {}
    /// Told the outcome of the call just made, after the core validated the
    /// decision: `Ok(())`, or the error the round fell back on. Lets a backend
    /// count failures that only validation sees. The default does nothing.
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        let _ = outcome;
    }
}

/// A policy type from the SDK running natively, in-process.
///
/// ```
/// use gangway_core::policy::{FairnessBackend, Native, defaults::FifoQuota};
/// let backend = Native::new("fifo-quota", FifoQuota);
/// assert_eq!(backend.name(), "fifo-quota");
/// ```
#[derive(Debug)]
pub struct Native<P> {
    name: String,
    policy: P,
}

impl<P> Native<P> {
    /// Wraps `policy` under `name`.
    pub fn new(name: impl Into<String>, policy: P) -> Self {
        Native {
            name: name.into(),
            policy,
        }
    }
}

impl<P: FairnessPolicy + Send> FairnessBackend for Native<P> {
    fn name(&self) -> &str {
        &self.name
    }
    fn order(&mut self, view: &RoundView) -> Result<FairnessDecision, PolicyError> {
        Ok(self.policy.order(view))
    }
}

impl<P: LocalityPolicy + Send> LocalityBackend for Native<P> {
    fn name(&self) -> &str {
        &self.name
    }
    fn spread(&mut self, view: &QueueView) -> Result<LocalityDecision, PolicyError> {
        Ok(self.policy.spread(view))
    }
}

impl<P: GangPolicy + Send> GangBackend for Native<P> {
    fn name(&self) -> &str {
        &self.name
    }
    fn on_blocked(&mut self, view: &QueueView) -> Result<GangDecision, PolicyError> {
        Ok(self.policy.on_blocked(view))
    }
}

/// The three slots' policies.
pub struct PolicySet {
    /// Fairness slot.
    pub fairness: Box<dyn FairnessBackend>,
    /// Locality-relaxation slot.
    pub locality: Box<dyn LocalityBackend>,
    /// Gang slot.
    pub gang: Box<dyn GangBackend>,
}

impl PolicySet {
    /// The built-in defaults: FIFO within VC quotas, strict locality, backfill.
    pub fn defaults() -> PolicySet {
        PolicySet {
            fairness: Box::new(Native::new("fifo-quota", defaults::FifoQuota)),
            locality: Box::new(Native::new("strict", defaults::StrictLocality)),
            gang: Box::new(Native::new("backfill", defaults::Backfill)),
        }
    }

    /// The names of the three policies (fairness, locality, gang).
    pub fn names(&self) -> [&str; 3] {
        [self.fairness.name(), self.locality.name(), self.gang.name()]
    }
}

impl Default for PolicySet {
    fn default() -> Self {
        PolicySet::defaults()
    }
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySet")
            .field("fairness", &self.fairness.name())
            .field("locality", &self.locality.name())
            .field("gang", &self.gang.name())
            .finish()
    }
}
