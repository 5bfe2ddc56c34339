//! The policy host side: one backend trait for every slot, the per-slot
//! rules, the guarded slot that owns validation, fallback, hot swap and
//! quarantine, and the set of all six slots.
//!
//! A backend ([`Backend`]) answers one call per slot per round; natively
//! ([`Native`] around any SDK policy type, [`Noop`] for "do nothing") or
//! sandboxed (a Wasm module, see the `wasm` module). Every answer is checked by its slot's
//! [`SlotRules`] before the scheduler uses it; a failure becomes a
//! [`PolicyError`] and the round falls back to the slot's built-in policy
//! (see [`guard`] for the exact behaviour).

mod backend;
mod error;
pub mod guard;
pub(crate) mod rules;
mod set;
mod slots;

pub use backend::{Backend, BoxedBackend, Native, Noop};
pub use error::{PolicyError, PolicyErrorKind};
pub use guard::{GuardPolicy, Guarded, SlotEvent, SlotHandle, SlotHealth, SlotStatus};
pub use rules::SlotCheck;
pub use set::{PolicySet, SlotRules};
