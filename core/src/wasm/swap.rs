//! Hot swap, rollback and quarantine for one policy slot.
//!
//! A [`GuardedSlot`] is a slot backend that holds a short stack of backends:
//! at the bottom a *baseline* that is never removed (normally the built-in
//! default, or a trusted native policy), above it the modules swapped in
//! since, the top one active. The host keeps the matching [`SlotHandle`],
//! which it may use from any thread.
//!
//! * **Hot swap.** [`SlotHandle::stage`] parks a new backend. The scheduler
//!   calls [`FairnessBackend::prepare_round`] (and its locality and gang
//!   twins) at the start of every round, before any slot runs; only there does
//!   the staged backend become active. A round therefore sees one backend per
//!   slot from start to end: no decision is lost, none is made twice, and the
//!   jobs pending or running across the swap are untouched (the scheduler, not
//!   the policy, owns them). The previous backend stays on the stack for
//!   rollback; at most [`GuardPolicy::keep_previous`] are kept.
//! * **Fallback.** A failed call (trap, budget, memory cap, bad reply, invalid
//!   decision) is a [`PolicyError`]: that round the scheduler uses the slot's
//!   built-in default instead, reports the error in
//!   [`crate::RoundReport::policy_errors`] and counts it in
//!   [`crate::Scheduler::slot_health`]. The module gets a fresh instance next
//!   round.
//! * **Quarantine.** After [`GuardPolicy::quarantine_after`] failures in a row
//!   the active module is removed from the stack and recorded as quarantined,
//!   and the one below it, the last one that was running before it, becomes
//!   active again from the next round (ultimately the baseline). The event is
//!   logged with `tracing` and listed in [`SlotHandle::status`].
//! * **Rollback.** [`SlotHandle::rollback`] asks for the same step down
//!   without quarantining, applied at the start of the next round.

use std::sync::{Arc, Mutex};

use gangway_plugin_sdk::{FairnessDecision, GangDecision, LocalityDecision, QueueView, RoundView};

use crate::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicyError};

/// When a guarded slot gives up on a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardPolicy {
    /// Quarantine the active module after this many failed calls in a row.
    pub quarantine_after: u32,
    /// How many earlier modules to keep above the baseline for rollback.
    pub keep_previous: usize,
}

impl Default for GuardPolicy {
    fn default() -> Self {
        GuardPolicy {
            quarantine_after: 3,
            keep_previous: 2,
        }
    }
}

/// Something that happened to a guarded slot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotEvent {
    /// A staged backend became active at the start of a round.
    Swapped {
        /// The backend that was active.
        from: String,
        /// The backend now active.
        to: String,
    },
    /// The active module failed too often and was removed.
    Quarantined {
        /// The module removed.
        module: String,
        /// The backend active again.
        restored: String,
        /// Its last error.
        error: PolicyError,
    },
    /// The host asked to go back to the previous backend.
    RolledBack {
        /// The backend removed.
        from: String,
        /// The backend active again.
        to: String,
    },
    /// A rollback was asked but only the baseline is left.
    RollbackRefused {
        /// The baseline, still active.
        active: String,
    },
}

/// A snapshot of a guarded slot, for the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotStatus {
    /// The active backend.
    pub active: String,
    /// The backends below it, nearest first; the last is the baseline.
    pub previous: Vec<String>,
    /// Failed calls in a row of the active backend.
    pub consecutive_failures: u32,
    /// Swaps applied so far.
    pub swaps: u64,
    /// Every event so far, oldest first (the last 256).
    pub events: Vec<SlotEvent>,
}

impl SlotStatus {
    /// Modules quarantined so far, oldest first.
    pub fn quarantined(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                SlotEvent::Quarantined { module, .. } => Some(module.as_str()),
                _ => None,
            })
            .collect()
    }
}

const MAX_EVENTS: usize = 256;

/// What the host and the slot share.
struct Shared<B: ?Sized> {
    staged: Option<Box<B>>,
    rollback: bool,
    status: SlotStatus,
}

/// The host's side of a [`GuardedSlot`]: stage a swap, ask for a rollback,
/// read the status. `Send + Sync`; clone it freely.
pub struct SlotHandle<B: ?Sized> {
    shared: Arc<Mutex<Shared<B>>>,
}

impl<B: ?Sized> Clone for SlotHandle<B> {
    fn clone(&self) -> Self {
        SlotHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<B: ?Sized> std::fmt::Debug for SlotHandle<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotHandle")
            .field("status", &self.status())
            .finish()
    }
}

impl<B: ?Sized> SlotHandle<B> {
    /// Parks `backend`; it becomes active at the start of the next round.
    /// Staging again before then replaces the parked one.
    pub fn stage(&self, backend: Box<B>) {
        if let Ok(mut s) = self.shared.lock() {
            s.staged = Some(backend);
        }
    }

    /// Asks to drop the active backend and go back to the previous one at
    /// the start of the next round (the baseline is never dropped).
    pub fn rollback(&self) {
        if let Ok(mut s) = self.shared.lock() {
            s.rollback = true;
        }
    }

    /// Whether a staged backend or a rollback waits for the next round.
    pub fn is_pending(&self) -> bool {
        self.shared
            .lock()
            .map(|s| s.staged.is_some() || s.rollback)
            .unwrap_or(false)
    }

    /// A snapshot of the slot.
    pub fn status(&self) -> SlotStatus {
        self.shared
            .lock()
            .map(|s| s.status.clone())
            .unwrap_or_default()
    }
}

/// Names a backend of any slot.
pub trait SlotBackend: Send {
    /// The backend's name.
    fn backend_name(&self) -> &str;
}

impl SlotBackend for dyn FairnessBackend {
    fn backend_name(&self) -> &str {
        self.name()
    }
}

impl SlotBackend for dyn LocalityBackend {
    fn backend_name(&self) -> &str {
        self.name()
    }
}

impl SlotBackend for dyn GangBackend {
    fn backend_name(&self) -> &str {
        self.name()
    }
}

/// A slot backend with hot swap, rollback and quarantine (see the module docs).
///
/// ```
/// use gangway_core::policy::{FairnessBackend, Native, defaults::FifoQuota};
/// use gangway_core::wasm::{GuardPolicy, GuardedSlot};
/// use gangway_core::{Scheduler, Topology};
///
/// let (slot, handle) = GuardedSlot::<dyn FairnessBackend>::new(
///     Box::new(Native::new("default", FifoQuota)),
///     GuardPolicy::default(),
/// );
/// let mut sched = Scheduler::new(Topology::uniform(1, 2, 8).unwrap());
/// sched.swap_fairness(Box::new(slot));
/// handle.stage(Box::new(Native::new("next", FifoQuota)));
/// assert_eq!(handle.status().active, "default");
/// sched.round(1).unwrap(); // the swap happens here, before the round's calls
/// assert_eq!(handle.status().active, "next");
/// assert_eq!(handle.status().previous, vec!["default".to_string()]);
/// ```
pub struct GuardedSlot<B: ?Sized + SlotBackend> {
    /// `stack[0]` is the baseline; the last entry is active.
    stack: Vec<Box<B>>,
    guard: GuardPolicy,
    consecutive: u32,
    shared: Arc<Mutex<Shared<B>>>,
}

impl<B: ?Sized + SlotBackend> GuardedSlot<B> {
    /// A guarded slot whose baseline (and first active backend) is `baseline`.
    pub fn new(baseline: Box<B>, guard: GuardPolicy) -> (GuardedSlot<B>, SlotHandle<B>) {
        let status = SlotStatus {
            active: baseline.backend_name().to_string(),
            ..SlotStatus::default()
        };
        let shared = Arc::new(Mutex::new(Shared {
            staged: None,
            rollback: false,
            status,
        }));
        let slot = GuardedSlot {
            stack: vec![baseline],
            guard,
            consecutive: 0,
            shared: shared.clone(),
        };
        (slot, SlotHandle { shared })
    }

    fn active(&self) -> &B {
        // The stack always holds the baseline.
        &self.stack[self.stack.len() - 1]
    }

    fn active_mut(&mut self) -> &mut B {
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn event(shared: &mut Shared<B>, e: SlotEvent) {
        if shared.status.events.len() == MAX_EVENTS {
            shared.status.events.remove(0);
        }
        shared.status.events.push(e);
    }

    fn sync_status(&self, shared: &mut Shared<B>) {
        shared.status.active = self.active().backend_name().to_string();
        shared.status.previous = self
            .stack
            .iter()
            .rev()
            .skip(1)
            .map(|b| b.backend_name().to_string())
            .collect();
        shared.status.consecutive_failures = self.consecutive;
    }

    /// Applies a staged swap or a rollback.
    fn between_rounds(&mut self) {
        let shared = self.shared.clone();
        let Ok(mut s) = shared.lock() else {
            return;
        };
        if std::mem::take(&mut s.rollback) {
            if self.stack.len() > 1 {
                let from = self.stack.pop().map(|b| b.backend_name().to_string());
                let to = self.active().backend_name().to_string();
                tracing::info!(from, to, "policy rolled back");
                Self::event(
                    &mut s,
                    SlotEvent::RolledBack {
                        from: from.unwrap_or_default(),
                        to,
                    },
                );
            } else {
                let active = self.active().backend_name().to_string();
                Self::event(&mut s, SlotEvent::RollbackRefused { active });
            }
            self.consecutive = 0;
        }
        if let Some(next) = s.staged.take() {
            let from = self.active().backend_name().to_string();
            let to = next.backend_name().to_string();
            self.stack.push(next);
            while self.stack.len() > self.guard.keep_previous + 2 {
                self.stack.remove(1);
            }
            self.consecutive = 0;
            s.status.swaps += 1;
            tracing::info!(from, to, "policy swapped in");
            Self::event(&mut s, SlotEvent::Swapped { from, to });
        }
        self.sync_status(&mut s);
    }

    /// Counts the outcome; quarantines the active module after too many
    /// failures in a row.
    fn outcome(&mut self, outcome: Result<(), &PolicyError>) {
        let shared = self.shared.clone();
        let Ok(mut s) = shared.lock() else {
            return;
        };
        match outcome {
            Ok(()) => self.consecutive = 0,
            Err(err) => {
                self.consecutive += 1;
                if self.consecutive >= self.guard.quarantine_after.max(1) && self.stack.len() > 1 {
                    let module = self
                        .stack
                        .pop()
                        .map(|b| b.backend_name().to_string())
                        .unwrap_or_default();
                    let restored = self.active().backend_name().to_string();
                    tracing::warn!(
                        module,
                        restored,
                        failures = self.consecutive,
                        %err,
                        "policy quarantined; restoring the previous one"
                    );
                    Self::event(
                        &mut s,
                        SlotEvent::Quarantined {
                            module,
                            restored,
                            error: err.clone(),
                        },
                    );
                    self.consecutive = 0;
                }
            }
        }
        self.sync_status(&mut s);
    }
}

impl GuardedSlot<dyn FairnessBackend> {
    /// A guarded fairness slot over the built-in default.
    pub fn fairness_default(guard: GuardPolicy) -> (Self, SlotHandle<dyn FairnessBackend>) {
        GuardedSlot::new(crate::policy::PolicySet::defaults().fairness, guard)
    }
}

impl GuardedSlot<dyn LocalityBackend> {
    /// A guarded locality slot over the built-in default.
    pub fn locality_default(guard: GuardPolicy) -> (Self, SlotHandle<dyn LocalityBackend>) {
        GuardedSlot::new(crate::policy::PolicySet::defaults().locality, guard)
    }
}

impl GuardedSlot<dyn GangBackend> {
    /// A guarded gang slot over the built-in default.
    pub fn gang_default(guard: GuardPolicy) -> (Self, SlotHandle<dyn GangBackend>) {
        GuardedSlot::new(crate::policy::PolicySet::defaults().gang, guard)
    }
}

impl FairnessBackend for GuardedSlot<dyn FairnessBackend> {
    fn name(&self) -> &str {
        self.active().name()
    }
    fn order(&mut self, view: &RoundView) -> Result<FairnessDecision, PolicyError> {
        self.active_mut().order(view)
    }
    fn prepare_round(&mut self) {
        self.between_rounds();
        self.active_mut().prepare_round();
    }
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        self.active_mut().report(outcome);
        self.outcome(outcome);
    }
}

impl LocalityBackend for GuardedSlot<dyn LocalityBackend> {
    fn name(&self) -> &str {
        self.active().name()
    }
    fn spread(&mut self, view: &QueueView) -> Result<LocalityDecision, PolicyError> {
        self.active_mut().spread(view)
    }
    fn prepare_round(&mut self) {
        self.between_rounds();
        self.active_mut().prepare_round();
    }
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        self.active_mut().report(outcome);
        self.outcome(outcome);
    }
}

impl GangBackend for GuardedSlot<dyn GangBackend> {
    fn name(&self) -> &str {
        self.active().name()
    }
    fn on_blocked(&mut self, view: &QueueView) -> Result<GangDecision, PolicyError> {
        self.active_mut().on_blocked(view)
    }
    fn prepare_round(&mut self) {
        self.between_rounds();
        self.active_mut().prepare_round();
    }
    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        self.active_mut().report(outcome);
        self.outcome(outcome);
    }
}
