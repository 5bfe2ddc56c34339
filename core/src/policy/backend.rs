//! A slot's policy as the scheduler calls it: one trait for every slot.

use gangway_plugin_sdk::{Manifest, Policy, SlotContract, TypeChoices, TypesView};
use serde::{Deserialize, Serialize};

use super::{PolicyError, ViewChanges};

/// A policy of slot `S` as the scheduler calls it: native or sandboxed,
/// fallible. One trait serves every slot; [`crate::policy::Guarded`] adds
/// validation, fallback, hot swap and quarantine around any of them.
pub trait Backend<S: SlotContract>: Send {
    /// A name for reports and errors (a policy name or a module path).
    fn name(&self) -> &str;

    /// The policy's decision for `view`.
    fn decide(&mut self, view: &S::View) -> Result<S::Decision, PolicyError>;

    /// The policy's decision for `view`, told what changed in the
    /// scheduler since earlier views ([`ViewChanges`]): how the scheduler's
    /// rounds call a backend. A backend that keeps its last view (a Wasm
    /// module sent view changes) keeps [`ViewChanges::stamp`] and asks
    /// [`ViewChanges::since`] at the next call instead of comparing the two
    /// views whole. The default ignores the changes and calls
    /// [`Backend::decide`]; the decision must be the same either way.
    fn decide_with_changes(
        &mut self,
        view: &S::View,
        changes: &ViewChanges<'_>,
    ) -> Result<S::Decision, PolicyError> {
        let _ = changes;
        self.decide(view)
    }

    /// The policy's decision for `view` with the cluster's GPU types
    /// beside it, and the types it chose for jobs of the view (contract
    /// 2.2): how a round asks a backend whose manifest takes the types
    /// ([`Manifest::gpu_types`]) on a cluster of several. The default
    /// decides without them ([`Backend::decide_with_changes`]) and chooses
    /// nothing.
    fn decide_typed(
        &mut self,
        view: &S::View,
        types: &TypesView,
        changes: &ViewChanges<'_>,
    ) -> Result<(S::Decision, TypeChoices), PolicyError> {
        let _ = types;
        self.decide_with_changes(view, changes)
            .map(|d| (d, TypeChoices::default()))
    }

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

    /// What this policy is, for a snapshot to record: its name, the
    /// SHA-256 of its Wasm module (none for a native policy) and its
    /// configuration bytes. The default records the name alone.
    fn origin(&self) -> PolicyOrigin {
        PolicyOrigin {
            name: self.name().to_string(),
            ..PolicyOrigin::default()
        }
    }

    /// Whether this backend never decides anything (the built-in `none` of
    /// the reclaim and defragment slots): the round then neither builds its
    /// view nor calls it.
    fn is_noop(&self) -> bool {
        false
    }
}

/// What a slot's policy is, as a [snapshot](crate::snapshot::Snapshot)
/// records it ([`Backend::origin`]): enough for a host to build the same
/// policy again after a restart, given the module's bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyOrigin {
    /// The policy's name (a built-in name or the module's name).
    pub name: String,
    /// The SHA-256 of its Wasm module in hex, or `None` for a native policy.
    pub module_sha256: Option<String>,
    /// The configuration it was started with (TOML for the built-ins; empty
    /// for defaults or when unknown).
    pub config: Vec<u8>,
}

impl PolicyOrigin {
    /// How events and a slot's status name the policy: its name, and for a
    /// Wasm module the first 12 hex digits of its SHA-256 after an `@`
    /// (`policy.wasm@3f2a9c01b7e4`), so that two modules loaded from one
    /// path, or under one name, are told apart.
    ///
    /// ```
    /// use gangway_core::policy::PolicyOrigin;
    /// let native = PolicyOrigin { name: "fifo".into(), ..PolicyOrigin::default() };
    /// assert_eq!(native.identity(), "fifo");
    /// let wasm = PolicyOrigin { module_sha256: Some("3f2a9c01b7e4d5".into()), ..native };
    /// assert_eq!(wasm.identity(), "fifo@3f2a9c01b7e4");
    /// ```
    pub fn identity(&self) -> String {
        match &self.module_sha256 {
            Some(hash) => format!("{}@{}", self.name, hash.get(..12).unwrap_or(hash)),
            None => self.name.clone(),
        }
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
    config: Vec<u8>,
}

impl<P> Native<P> {
    /// Wraps `policy` under `name`.
    pub fn new(name: impl Into<String>, policy: P) -> Self {
        Native {
            name: name.into(),
            policy,
            config: Vec::new(),
        }
    }

    /// Records `config` as the configuration `policy` was made from (what
    /// [`Backend::origin`] reports; the policy is already configured).
    pub fn with_config(mut self, config: &[u8]) -> Self {
        self.config = config.to_vec();
        self
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
    fn decide_typed(
        &mut self,
        view: &S::View,
        types: &TypesView,
        _changes: &ViewChanges<'_>,
    ) -> Result<(S::Decision, TypeChoices), PolicyError> {
        Ok(self.policy.decide_typed(view, types))
    }
    fn manifest(&self) -> Manifest {
        self.policy.manifest()
    }
    fn origin(&self) -> PolicyOrigin {
        PolicyOrigin {
            name: self.name.clone(),
            module_sha256: None,
            config: self.config.clone(),
        }
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
