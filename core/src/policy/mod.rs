//! The policy host side: one backend trait for every slot, the per-slot
//! rules, the guarded slot that owns validation, fallback, hot swap and
//! quarantine, and the set of all six slots.
//!
//! A backend ([`Backend`]) answers one call per slot per round; natively
//! ([`Native`] around any SDK policy type, [`Noop`] for "do nothing") or
//! sandboxed (a Wasm module, see the `wasm` module). Every answer is checked
//! against its slot's rules ([`gangway_plugin_sdk::SlotContract::validate`])
//! before the scheduler uses it; a failure becomes a
//! [`PolicyError`] and the round falls back to the slot's built-in policy
//! (see "Guarded slots" below for the exact behaviour).
//!
//! # Guarded slots
//!
//! A slot's policy in the scheduler: validation, fallback, hot swap,
//! rollback and quarantine, the same for every slot and every kind of
//! backend (native or Wasm). This is the one place policy failures are
//! handled.
//!
//! A [`Guarded`] slot holds a short stack of backends: at the bottom a
//! *baseline* that is never removed (normally the built-in policy, or a
//! trusted native one), above it the policies swapped in since, the top one
//! active. Besides the stack it keeps the slot's built-in policy as the
//! *fallback*. The host may keep a [`SlotHandle`], usable from any thread.
//!
//! * **Validation and fallback.** Every decision is checked against the view
//!   it answers (and, for reclaim and defragment decisions, against the
//!   cluster when the round applies it). A failed call (trap, budget, memory
//!   cap, refusal, bad reply, invalid decision) is a [`PolicyError`]: that
//!   round the slot's built-in policy decides instead, the error is listed in
//!   [`crate::RoundReport::policy_errors`], counted in [`SlotHealth`] and
//!   logged with `tracing`. The failing backend is told ([`Backend::report`]);
//!   a Wasm backend discards its instance and starts a fresh one next call.
//! * **Hot swap.** [`SlotHandle::stage`] parks a new backend; it becomes
//!   active at the start of the next round, before any slot runs, so a round
//!   sees one backend per slot from start to end: no decision is lost, none
//!   is made twice, and jobs pending or running across the swap are untouched.
//!   The previous backend stays on the stack for rollback; at most
//!   [`GuardSettings::keep_previous`] are kept.
//! * **Quarantine.** After [`GuardSettings::quarantine_after`] failures in a
//!   row, or [`GuardSettings::window_failures`] among its last
//!   [`GuardSettings::window`] calls however they alternate with good ones,
//!   the active backend is removed from the stack and recorded as
//!   quarantined, and the one below it becomes active again from the next
//!   call (ultimately the baseline). A baseline that fails as often is
//!   quarantined too, and the slot's built-in policy becomes its baseline
//!   for good, so a host that started with an untrusted module (e.g.
//!   `replay --fairness MODULE`) never pays for a broken one every round.
//!   The event is logged with `tracing` as a warning and listed in
//!   [`SlotHandle::status`].
//! * **Rollback.** [`SlotHandle::rollback`] asks for the same step down
//!   without quarantining, applied at the start of the next round.

mod backend;
mod error;
mod guard;
mod set;
mod view_changes;

pub use crate::book::Stamp;
pub use backend::{Backend, BoxedBackend, Native, Noop, PolicyOrigin};
pub(crate) use error::invalid;
pub use error::{BudgetUnit, PolicyError, PolicyErrorKind};
/// The slot markers, to name a slot in [`Scheduler::swap`](crate::Scheduler::swap),
/// [`PolicySet::slot`] or a module's `backend::<S>()` without depending on
/// `gangway-plugin-sdk`.
pub use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry, SlotContract};
#[cfg(feature = "conformance")]
pub(crate) use guard::check_choices;
pub use guard::{GuardSettings, Guarded, SlotEvent, SlotHandle, SlotHealth, SlotStatus};
pub use set::PolicySet;
pub use view_changes::ViewChanges;
