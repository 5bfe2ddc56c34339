//! The sandboxed WebAssembly policy host (feature `wasm`, on by default).
//!
//! Policies are components implementing `gangway:policy@1.0.0` (the WIT file
//! and `CONTRACT.md` in `gangway-plugin-sdk`). The host side is four pieces:
//!
//! * [`PolicyEngine`]: one shared wasmtime engine with the [`SandboxConfig`]
//!   (memory cap, [`Budget`] of fuel or an epoch deadline per call) and a
//!   compiled-module cache keyed by the SHA-256 of the bytes, so loading a
//!   known module again costs a hash and a map lookup.
//! * [`PolicyEngine::load`] refuses anything but a component that exports at
//!   least one `gangway:policy/<slot>@1.x` interface and imports at most
//!   `gangway:policy/log`, each with a [`WasmError`] naming the module and
//!   the problem; then compiles it and makes a warm-up call per slot.
//! * Calls enter a module by one of two [`CallPath`]s: by default straight
//!   into the component's main core module, with the contract's canonical
//!   ABI done by the host (for components of the standard shape, which is
//!   what wit-bindgen and wit-component make), else through wasmtime's
//!   component runtime. Same code, same sandbox, same decisions and errors;
//!   the direct path makes a call several times cheaper.
//! * [`PolicyModule`]: a loaded module (cheap to clone) that makes slot
//!   backends, each with its own instance and configuration. Any failed call
//!   is a typed [`crate::policy::PolicyError`] (trap, out of fuel, deadline,
//!   memory cap, ABI, decode, refusal; invalid decisions are caught by the
//!   round's validation); the failing instance is dropped and a fresh one is
//!   made for the next call, never reused.
//! * [`GuardedSlot`] and [`SlotHandle`]: hot swap between rounds, rollback,
//!   and quarantine after repeated failures with the previous module
//!   restored. See [`swap`] for the exact fallback behaviour.
//!
//! ```no_run
//! use gangway_core::policy::FairnessBackend;
//! use gangway_core::wasm::{GuardPolicy, GuardedSlot, PolicyEngine, SandboxConfig};
//! use gangway_core::{Scheduler, Topology};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = PolicyEngine::new(SandboxConfig::default())?;
//! let module = engine.load("fifo.wasm", &std::fs::read("fifo.wasm")?)?;
//! println!("{} implements {:?} (contract {})", module.name(), module.slots(), module.contract_version());
//!
//! let mut sched = Scheduler::new(Topology::uniform(4, 8, 8)?);
//! let (slot, handle) = GuardedSlot::<dyn FairnessBackend>::fairness_default(GuardPolicy::default());
//! sched.swap_fairness(Box::new(slot));
//! handle.stage(module.fairness(b"")?); // active from the next round on
//! let report = sched.round(0)?;
//! assert!(report.policy_errors.is_empty());
//! # Ok(())
//! # }
//! ```

mod config;
mod direct;
mod error;
mod host;
mod instance;
pub mod swap;

pub use config::{Budget, CallPath, SandboxConfig};
pub use error::WasmError;
pub use host::{CONTRACT_VERSION, PolicyEngine, PolicyModule};
pub use swap::{GuardPolicy, GuardedSlot, SlotBackend, SlotEvent, SlotHandle, SlotStatus};

use crate::policy::Slot;

/// The name of a slot's bulk function in its WIT interface.
fn call_name(slot: Slot) -> &'static str {
    match slot {
        Slot::Fairness => "order",
        Slot::Locality => "spread",
        Slot::Gang => "on-blocked",
    }
}
