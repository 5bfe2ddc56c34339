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
//! (see [`guard`] for the exact behaviour).

mod backend;
mod error;
pub mod guard;
mod set;

pub use backend::{Backend, BoxedBackend, Native, Noop};
pub(crate) use error::invalid;
pub use error::{PolicyError, PolicyErrorKind};
pub use guard::{GuardSettings, Guarded, SlotEvent, SlotHandle, SlotHealth, SlotStatus};
pub use set::PolicySet;
