//! A slot's policy in the scheduler: validation, fallback, hot swap,
//! rollback and quarantine (described in the `policy` module's docs).

use std::sync::{Arc, Mutex};

use gangway_plugin_sdk::{Manifest, SlotContract, TypeChoices, TypesView};

use super::backend::{BoxedBackend, PolicyOrigin, fallback_backend};
use super::error::invalid;
use super::{PolicyError, PolicyErrorKind, ViewChanges};

/// When a guarded slot gives up on a policy: after a run of failures, after
/// too many among its recent calls however they alternate with good ones,
/// after too large a share of failures over a longer window, or when its
/// failures took too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardSettings {
    /// Quarantine the active policy after this many failed calls in a row.
    pub quarantine_after: u32,
    /// Quarantine it too after [`GuardSettings::window_failures`] failed
    /// calls among its last `window` calls (at most 64).
    pub window: u32,
    /// See [`GuardSettings::window`].
    pub window_failures: u32,
    /// Quarantine it too after [`GuardSettings::long_window_failures`]
    /// failed calls among its last `long_window` calls (at most 64): a
    /// share of failures, however evenly spread.
    pub long_window: u32,
    /// See [`GuardSettings::long_window`].
    pub long_window_failures: u32,
    /// Quarantine it too when its failed calls among its last
    /// `long_window` calls took this long in all (wall-clock time of the
    /// calls, the host's work in them included): failures that cost much
    /// are quarantined however rare. `None`: no such bound.
    pub failure_time: Option<std::time::Duration>,
    /// How many earlier policies to keep above the baseline for rollback.
    pub keep_previous: usize,
}

impl Default for GuardSettings {
    /// Three failures in a row, five of the last twenty calls (a policy
    /// that fails every second call is quarantined by its tenth), eight of
    /// the last 64 (12.5 %: one that fails every fifth call is quarantined
    /// by its fortieth), or failures that took a second among the last 64
    /// calls; two earlier policies kept.
    fn default() -> Self {
        GuardSettings {
            quarantine_after: 3,
            window: 20,
            window_failures: 5,
            long_window: 64,
            long_window_failures: 8,
            failure_time: Some(std::time::Duration::from_secs(1)),
            keep_previous: 2,
        }
    }
}

impl GuardSettings {
    /// Settings that never quarantine (a host that wants every failure to
    /// fall back for its round only, e.g. to measure a policy).
    pub fn never_quarantine(keep_previous: usize) -> GuardSettings {
        GuardSettings {
            quarantine_after: u32::MAX,
            window: 64,
            window_failures: u32::MAX,
            long_window: 64,
            long_window_failures: u32::MAX,
            failure_time: None,
            keep_previous,
        }
    }
}

/// The outcomes of a policy's last 64 calls, newest in the lowest bit (1:
/// a failure), and how long its failed ones took: what the failure-rate
/// and failure-time rules count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Recent {
    outcomes: u64,
    /// The durations of the failed calls among the last 64, oldest first,
    /// each with the call's number.
    failed: std::collections::VecDeque<(u64, std::time::Duration)>,
    /// Calls recorded so far.
    calls: u64,
}

impl Recent {
    fn record(&mut self, failed: Option<std::time::Duration>) {
        self.outcomes = (self.outcomes << 1) | u64::from(failed.is_some());
        self.calls += 1;
        if let Some(took) = failed {
            self.failed.push_back((self.calls, took));
        }
        while self
            .failed
            .front()
            .is_some_and(|(call, _)| self.calls - call >= 64)
        {
            self.failed.pop_front();
        }
    }

    /// Failures among the last `window` calls.
    fn failures(&self, window: u32) -> u32 {
        (self.outcomes & mask(window)).count_ones()
    }

    /// The time the failed calls among the last `window` calls took.
    fn failure_time(&self, window: u32) -> std::time::Duration {
        let window = u64::from(window.min(64));
        self.failed
            .iter()
            .filter(|(call, _)| self.calls - call < window)
            .map(|(_, took)| *took)
            .sum()
    }
}

/// The lowest `window` bits (all 64 from 64 on).
fn mask(window: u32) -> u64 {
    match window {
        0 => 0,
        64.. => u64::MAX,
        w => (1u64 << w) - 1,
    }
}

/// Failure counters of a slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotHealth {
    /// Calls made to the slot's active policies.
    pub calls: u64,
    /// Failed calls, ever.
    pub failures: u64,
    /// Failed calls in a row of the active policy (reset by a good call).
    pub consecutive: u32,
    /// Failed calls of the active policy among its last
    /// [`GuardSettings::window`] calls.
    pub recent_failures: u32,
    /// Policies quarantined, ever.
    pub quarantines: u64,
}

/// Something that happened to a guarded slot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum SlotEvent {
    /// A staged backend became active at the start of a round.
    Swapped {
        /// The backend that was active.
        from: String,
        /// The backend now active.
        to: String,
    },
    /// The active policy failed too often and was removed.
    Quarantined {
        /// The policy removed.
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

/// A snapshot of a guarded slot, for the host. Events name policies by
/// [`PolicyOrigin::identity`] (name, and module hash for Wasm).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotStatus {
    /// The active backend's name.
    pub active: String,
    /// The active backend's identity (its name, and its module's hash for
    /// Wasm): what events call it.
    pub active_identity: String,
    /// The backends below it, nearest first; the last is the baseline.
    pub previous: Vec<String>,
    /// Failure counters.
    pub health: SlotHealth,
    /// Swaps applied so far.
    pub swaps: u64,
    /// Every event so far, oldest first (the last 256).
    pub events: Vec<SlotEvent>,
}

impl SlotStatus {
    /// Policies quarantined so far (their identities), oldest first.
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
struct Shared<S: SlotContract> {
    staged: Option<BoxedBackend<S>>,
    rollback: bool,
    status: SlotStatus,
}

/// The host's side of a [`Guarded`] slot: stage a swap, ask for a rollback,
/// read the status. `Send + Sync`; clone it freely.
pub struct SlotHandle<S: SlotContract> {
    shared: Arc<Mutex<Shared<S>>>,
}

impl<S: SlotContract> Clone for SlotHandle<S> {
    fn clone(&self) -> Self {
        SlotHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<S: SlotContract> std::fmt::Debug for SlotHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotHandle")
            .field("slot", &S::SLOT)
            .field("status", &self.status())
            .finish()
    }
}

impl<S: SlotContract> SlotHandle<S> {
    /// Parks `backend`; it becomes active at the start of the next round.
    /// Staging again before then replaces the parked one.
    pub fn stage(&self, backend: BoxedBackend<S>) {
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

/// One slot's policies in the scheduler (see the module docs).
///
/// ```
/// use gangway_core::policy::{Guarded, Native};
/// use gangway_core::{Scheduler, Topology};
/// use gangway_plugin_sdk::{FifoQuota, Fairness};
///
/// let mut sched = Scheduler::new(Topology::uniform(1, 2, 8).unwrap());
/// let handle = sched.policies().slot::<Fairness>().handle();
/// handle.stage(Box::new(Native::new("next", FifoQuota)));
/// assert_eq!(handle.status().active, "fifo-quota");
/// sched.round(1).unwrap(); // the swap happens here, before the round's calls
/// assert_eq!(handle.status().active, "next");
/// assert_eq!(handle.status().previous, vec!["fifo-quota".to_string()]);
/// ```
pub struct Guarded<S: SlotContract> {
    /// `stack[0]` is the baseline; the last entry is active.
    stack: Vec<BoxedBackend<S>>,
    /// Whether `stack[0]` is the slot's built-in policy (never quarantined).
    fallback_baseline: bool,
    fallback: BoxedBackend<S>,
    guard: GuardSettings,
    health: SlotHealth,
    /// The active policy's last outcomes.
    recent: Recent,
    shared: Arc<Mutex<Shared<S>>>,
    /// What happened to the slot since the events were last taken.
    round_events: Vec<SlotEvent>,
    /// Whether [`Guarded::swap`] changed the active backend since the last
    /// round began (the next round reports the slot as swapped).
    swapped_between_rounds: bool,
}

impl<S: SlotContract> std::fmt::Debug for Guarded<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("slot", &S::SLOT)
            .field("active", &self.name())
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

impl<S: SlotContract> Guarded<S> {
    /// A guarded slot whose baseline (and first active backend) is
    /// `baseline`, with the default [`GuardSettings`].
    pub fn new(baseline: BoxedBackend<S>) -> Guarded<S> {
        Guarded::with_guard(baseline, GuardSettings::default())
    }

    /// A guarded slot over `baseline` with the given guard policy.
    pub fn with_guard(baseline: BoxedBackend<S>, guard: GuardSettings) -> Guarded<S> {
        let status = SlotStatus {
            active: baseline.name().to_string(),
            active_identity: baseline.origin().identity(),
            ..SlotStatus::default()
        };
        Guarded {
            stack: vec![baseline],
            fallback_baseline: false,
            fallback: fallback_backend::<S>(),
            guard,
            health: SlotHealth::default(),
            recent: Recent::default(),
            round_events: Vec::new(),
            swapped_between_rounds: false,
            shared: Arc::new(Mutex::new(Shared {
                staged: None,
                rollback: false,
                status,
            })),
        }
    }

    /// The slot with its fallback policy ([`SlotContract::Fallback`]) as
    /// its baseline.
    pub fn fallback_only() -> Guarded<S> {
        Guarded {
            fallback_baseline: true,
            ..Guarded::new(fallback_backend::<S>())
        }
    }

    /// The host's handle for swaps, rollbacks and status.
    pub fn handle(&self) -> SlotHandle<S> {
        SlotHandle {
            shared: self.shared.clone(),
        }
    }

    /// The guard policy.
    pub fn set_guard(&mut self, guard: GuardSettings) {
        self.guard = guard;
    }

    fn active(&self) -> &BoxedBackend<S> {
        // The stack always holds the baseline.
        &self.stack[self.stack.len() - 1]
    }

    fn active_mut(&mut self) -> &mut BoxedBackend<S> {
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    /// The active backend's name.
    pub fn name(&self) -> &str {
        self.active().name()
    }

    /// What the active backend declared when it was loaded.
    pub fn manifest(&self) -> Manifest {
        self.active().manifest()
    }

    /// What the active backend is: name, module hash and configuration.
    pub fn origin(&self) -> PolicyOrigin {
        self.active().origin()
    }

    /// Failure counters.
    pub fn health(&self) -> &SlotHealth {
        &self.health
    }

    /// A snapshot of the slot.
    pub fn status(&self) -> SlotStatus {
        self.handle().status()
    }

    /// What happened to the slot (swaps, rollbacks, quarantines) since the
    /// last call, oldest first.
    pub(crate) fn take_events(&mut self) -> Vec<SlotEvent> {
        std::mem::take(&mut self.round_events)
    }

    /// Whether the active backend decides nothing (the round skips it).
    pub fn is_noop(&self) -> bool {
        self.active().is_noop()
    }

    /// Makes `backend` active now, keeping the previous one for rollback, as
    /// a staged swap does at the start of a round. Call it between rounds.
    pub fn swap(&mut self, backend: BoxedBackend<S>) {
        let shared = self.shared.clone();
        if let Ok(mut s) = shared.lock() {
            self.push(backend, &mut s);
            self.sync_status(&mut s);
            self.swapped_between_rounds = true;
        }
    }

    fn push(&mut self, next: BoxedBackend<S>, s: &mut Shared<S>) {
        let from = self.active().origin().identity();
        let to = next.origin().identity();
        self.stack.push(next);
        while self.stack.len() > self.guard.keep_previous + 2 {
            self.stack.remove(1);
        }
        self.fresh_start();
        s.status.swaps += 1;
        tracing::info!(slot = %S::SLOT, from, to, "policy swapped in");
        event(s, &mut self.round_events, SlotEvent::Swapped { from, to });
    }

    /// Forgets the active policy's failures: another one is active now.
    fn fresh_start(&mut self) {
        self.health.consecutive = 0;
        self.health.recent_failures = 0;
        self.recent = Recent::default();
    }

    fn sync_status(&self, s: &mut Shared<S>) {
        s.status.active.clear();
        s.status.active.push_str(self.name());
        s.status.active_identity = self.active().origin().identity();
        s.status.previous = self
            .stack
            .iter()
            .rev()
            .skip(1)
            .map(|b| b.name().to_string())
            .collect();
        s.status.health = self.health.clone();
    }

    /// Applies a staged swap or a rollback, then lets the active backend
    /// prepare. Returns whether the active backend changed. A round that
    /// changes nothing only copies the health counters to the status (no
    /// allocation: this runs for every slot every round).
    pub(crate) fn prepare_round(&mut self) -> bool {
        let mut changed = std::mem::take(&mut self.swapped_between_rounds);
        let shared = Arc::clone(&self.shared);
        if let Ok(mut s) = shared.lock() {
            if std::mem::take(&mut s.rollback) {
                if self.stack.len() > 1 {
                    let from = self.stack.pop().map(|b| b.origin().identity());
                    let to = self.active().origin().identity();
                    tracing::info!(slot = %S::SLOT, from, to, "policy rolled back");
                    event(
                        &mut s,
                        &mut self.round_events,
                        SlotEvent::RolledBack {
                            from: from.unwrap_or_default(),
                            to,
                        },
                    );
                    changed = true;
                } else {
                    let active = self.active().origin().identity();
                    event(
                        &mut s,
                        &mut self.round_events,
                        SlotEvent::RollbackRefused { active },
                    );
                }
                self.fresh_start();
            }
            if let Some(next) = s.staged.take() {
                self.push(next, &mut s);
                changed = true;
            }
            if changed {
                self.sync_status(&mut s);
            } else {
                s.status.health = self.health.clone();
            }
        }
        self.active_mut().prepare_round();
        changed
    }

    /// Asks the active backend for its decision on `view` and checks it
    /// against the view. On success the caller must [`Guarded::settle`]
    /// once it has applied the decision; on failure the error is counted and
    /// the built-in policy's decision is returned with it.
    pub(crate) fn decide(
        &mut self,
        view: &S::View,
        changes: &ViewChanges<'_>,
    ) -> Decided<S::Decision> {
        self.decide_typed(view, None, changes)
    }

    /// [`Guarded::decide`] with the cluster's GPU types beside the view
    /// (`types`, contract 2.2), for a backend whose manifest takes them:
    /// its type choices are checked too (each a job of `types` and one of
    /// its allowed types, at most one per job). `None`: the plain call.
    pub(crate) fn decide_typed(
        &mut self,
        view: &S::View,
        types: Option<&TypesView>,
        changes: &ViewChanges<'_>,
    ) -> Decided<S::Decision> {
        self.health.calls += 1;
        let started = std::time::Instant::now();
        let active = self.active_mut();
        let answer = match types {
            Some(types) => active
                .decide_typed(view, types, changes)
                .and_then(|(d, c)| {
                    check_choices(types, &c)
                        .map(|()| (d, c))
                        .map_err(|why| PolicyError::new(S::SLOT, active.name(), invalid(why)))
                }),
            None => active
                .decide_with_changes(view, changes)
                .map(|d| (d, TypeChoices::default())),
        }
        .and_then(|(d, c)| match S::validate(view, &d) {
            Ok(()) => Ok((d, c)),
            Err(bad) => Err(PolicyError::new(S::SLOT, active.name(), bad.into())),
        });
        match answer {
            Ok((decision, choices)) => Decided {
                decision,
                choices,
                error: None,
            },
            Err(error) => {
                self.failed(&error, started.elapsed());
                Decided {
                    decision: self.fallback(view),
                    choices: TypeChoices::default(),
                    error: Some(error),
                }
            }
        }
    }

    /// [`Guarded::decide`] for a decision that needs no further check:
    /// settles a valid answer at once.
    pub(crate) fn decide_settled(
        &mut self,
        view: &S::View,
        changes: &ViewChanges<'_>,
    ) -> Decided<S::Decision> {
        let decided = self.decide(view, changes);
        if decided.error.is_none() {
            self.settle(Ok(()));
        }
        decided
    }

    /// [`Guarded::decide_typed`] for a decision that needs no further
    /// check: settles a valid answer at once.
    pub(crate) fn decide_settled_typed(
        &mut self,
        view: &S::View,
        types: Option<&TypesView>,
        changes: &ViewChanges<'_>,
    ) -> Decided<S::Decision> {
        let decided = self.decide_typed(view, types, changes);
        if decided.error.is_none() {
            self.settle(Ok(()));
        }
        decided
    }

    /// The built-in policy's decision for `view` (empty if even it fails,
    /// which the built-ins do not on a view the core made).
    pub(crate) fn fallback(&mut self, view: &S::View) -> S::Decision {
        self.fallback
            .decide(view)
            .ok()
            .filter(|d| S::validate(view, d).is_ok())
            .unwrap_or_default()
    }

    /// The outcome of applying a decision [`Guarded::decide`] returned
    /// without error: `Err` when the core could not apply it (e.g. a reclaim
    /// that frees no room). Returns the error to report, if any.
    pub(crate) fn settle(&mut self, outcome: Result<(), PolicyErrorKind>) -> Option<PolicyError> {
        match outcome {
            Ok(()) => {
                self.health.consecutive = 0;
                self.recent.record(None);
                self.health.recent_failures = self.recent.failures(self.guard.window);
                self.active_mut().report(Ok(()));
                None
            }
            Err(kind) => {
                let error = PolicyError::new(S::SLOT, self.name(), kind);
                // The call itself answered; applying its decision failed.
                self.failed(&error, std::time::Duration::ZERO);
                Some(error)
            }
        }
    }

    /// Counts a failure (a call that took `took`), tells the backend, and
    /// quarantines it after too many in a row, among its recent calls or
    /// as a share of its calls, or when its failures took too long.
    fn failed(&mut self, error: &PolicyError, took: std::time::Duration) {
        tracing::warn!(%error, "policy failed; the built-in policy decides this round");
        self.health.failures += 1;
        self.health.consecutive += 1;
        self.recent.record(Some(took));
        self.health.recent_failures = self.recent.failures(self.guard.window);
        self.active_mut().report(Err(error));
        let shared = self.shared.clone();
        let Ok(mut s) = shared.lock() else {
            return;
        };
        let removable = self.stack.len() > 1 || !self.fallback_baseline;
        if let Some(rule) = self.broken_rule()
            && removable
        {
            self.quarantine(error, &rule, &mut s);
        }
        self.sync_status(&mut s);
    }

    /// Which quarantine rule the active policy's failures broke, in words.
    fn broken_rule(&self) -> Option<String> {
        let g = &self.guard;
        let h = &self.health;
        let long = self.recent.failures(g.long_window);
        let time = self.recent.failure_time(g.long_window);
        if h.consecutive >= g.quarantine_after.max(1) {
            Some(format!("{} failed calls in a row", h.consecutive))
        } else if h.recent_failures >= g.window_failures.max(1) {
            Some(format!(
                "{} failed calls among its last {}",
                h.recent_failures, g.window
            ))
        } else if long >= g.long_window_failures.max(1) {
            Some(format!(
                "{long} failed calls among its last {}",
                g.long_window
            ))
        } else {
            g.failure_time.filter(|limit| time >= *limit).map(|limit| {
                format!(
                    "its failed calls among its last {} took {} ms (at most {} ms)",
                    g.long_window,
                    time.as_millis(),
                    limit.as_millis()
                )
            })
        }
    }

    /// Removes the active policy (the baseline itself gives way to the
    /// built-in policy) for breaking `rule`, and records why.
    fn quarantine(&mut self, error: &PolicyError, rule: &str, s: &mut Shared<S>) {
        let module = if self.stack.len() > 1 {
            self.stack.pop().map(|b| b.origin().identity())
        } else {
            // The baseline itself: the built-in policy replaces it.
            self.fallback_baseline = true;
            Some(
                std::mem::replace(&mut self.stack[0], fallback_backend::<S>())
                    .origin()
                    .identity(),
            )
        }
        .unwrap_or_default();
        let restored = self.active().origin().identity();
        tracing::warn!(
            slot = %S::SLOT,
            module,
            restored,
            failures = self.health.consecutive,
            recent_failures = self.health.recent_failures,
            %error,
            "policy quarantined after {rule}; the previous one is active again"
        );
        event(
            s,
            &mut self.round_events,
            SlotEvent::Quarantined {
                module,
                restored,
                error: error.clone(),
            },
        );
        self.fresh_start();
        self.health.quarantines += 1;
    }
}

/// Records `e` in the slot's status (the last [`MAX_EVENTS`]) and among
/// the events of the round in progress (`round_events`).
fn event<S: SlotContract>(s: &mut Shared<S>, round_events: &mut Vec<SlotEvent>, e: SlotEvent) {
    if s.status.events.len() == MAX_EVENTS {
        s.status.events.remove(0);
    }
    round_events.push(e.clone());
    s.status.events.push(e);
}

/// A slot's decision for one round, and the error that made the built-in
/// policy decide instead, if any.
#[derive(Clone, Debug)]
pub(crate) struct Decided<D> {
    pub(crate) decision: D,
    /// The GPU types the policy chose for jobs (contract 2.2; empty unless
    /// it was asked with the types).
    pub(crate) choices: TypeChoices,
    pub(crate) error: Option<PolicyError>,
}

/// Whether `choices` name only jobs of `types`, each once, each on one of
/// its allowed types; why not, if not.
pub(crate) fn check_choices(types: &TypesView, choices: &TypeChoices) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for c in &choices.choices {
        let Some(job) = types.job(c.job) else {
            return Err(format!(
                "chooses a GPU type for {}, which the view does not have",
                c.job
            ));
        };
        if !job.allowed.contains(&c.gpu_type) {
            return Err(format!(
                "chooses {} for {}, which may not run on it",
                c.gpu_type, c.job
            ));
        }
        if !seen.insert(c.job) {
            return Err(format!("chooses a GPU type for {} twice", c.job));
        }
    }
    Ok(())
}
