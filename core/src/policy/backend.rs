//! A slot's policy as the scheduler calls it: one trait for every slot.

use gangway_plugin_sdk::{Manifest, Policy, SlotContract};

use super::PolicyError;

/// A policy of slot `S` as the scheduler calls it: native or sandboxed,
/// fallible. One trait serves every slot; [`crate::policy::Guarded`] adds
/// validation, fallback, hot swap and quarantine around any of them.
pub trait Backend<S: SlotContract>: Send {
    /// A name for reports and errors (a policy name or a module path).
    fn name(&self) -> &str;

    /// The policy's decision for `view`.
    fn decide(&mut self, view: &S::View) -> Result<S::Decision, PolicyError>;

    /// What the policy declared about itself when it was loaded.
    fn manifest(&self) -> Manifest {
        Manifest::default()
    }

    /// Called once at the start of every round, before any slot is asked.
    /// The default does nothing.
    fn prepare_round(&mut self) {}

    /// Told the outcome of the call just made, after the core validated the
    /// decision (and, for decisions the core applies to its state, after it
    /// tried): `Ok(())`, or the error the round fell back on. A Wasm backend
    /// discards its instance on any error. The default does nothing.
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        let _ = outcome;
    }

    /// Whether this backend never decides anything (the built-in `none` of
    /// the reclaim and defragment slots): the round then neither builds its
    /// view nor calls it.
    fn is_noop(&self) -> bool {
        false
    }
}

/// A boxed backend of slot `S`.
pub type BoxedBackend<S> = Box<dyn Backend<S>>;

/// Slot `S`'s built-in policy as a backend: [`Noop`] for a slot whose
/// built-in decides nothing, else its [`SlotContract::Fallback`] natively.
pub(crate) fn fallback_backend<S: SlotContract>() -> BoxedBackend<S> {
    if S::FALLBACK_DECIDES_NOTHING {
        Box::new(Noop)
    } else {
        Box::new(Native::new(S::FALLBACK, S::Fallback::default()))
    }
}

/// A policy type from the SDK running natively, in-process.
///
/// ```
/// use gangway_core::policy::{Backend, Native};
/// use gangway_plugin_sdk::{FifoQuota, Fairness, QueueOrder, FairnessView};
///
/// let mut backend = Native::new("fifo-quota", FifoQuota);
/// assert_eq!(Backend::<Fairness>::name(&backend), "fifo-quota");
/// assert_eq!(Backend::<Fairness>::manifest(&backend).queue_order, QueueOrder::Submit);
/// let d = Backend::<Fairness>::decide(&mut backend, &FairnessView::default()).unwrap();
/// assert!(d.order.is_empty());
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

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }
}

impl<S: SlotContract, P: Policy<S> + Send> Backend<S> for Native<P> {
    fn name(&self) -> &str {
        &self.name
    }
    fn decide(&mut self, view: &S::View) -> Result<S::Decision, PolicyError> {
        Ok(self.policy.decide(view))
    }
    fn manifest(&self) -> Manifest {
        self.policy.manifest()
    }
}

/// The backend that decides nothing, `none`: the built-in of the reclaim and
/// defragment slots (never stop or move a running job). Any slot accepts
/// it; its answer is the slot's empty decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Noop;

impl<S: SlotContract> Backend<S> for Noop {
    fn name(&self) -> &str {
        "none"
    }
    fn decide(&mut self, _view: &S::View) -> Result<S::Decision, PolicyError> {
        Ok(S::Decision::default())
    }
    fn is_noop(&self) -> bool {
        true
    }
}
