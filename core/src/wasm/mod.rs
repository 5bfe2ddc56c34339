//! The sandboxed WebAssembly policy host (feature `wasm`, on by default).
//!
//! Policies are components implementing `gangway:policy@2.x` (2.1.0 here; the WIT file
//! and `CONTRACT.md` in `gangway-plugin-sdk`). The host side, read top-down:
//!
//! * [`contract`](self) rules: the interface names and versions accepted
//!   (any `2.x`; a `1.x` module is refused with how to rebuild it), the
//!   WebAssembly features a policy may use, and how much of a guest's text
//!   the host keeps.
//! * The store of one instance: a memory cap for the whole instance, small
//!   caps on tables, `log` accounting (host work charged to the call's fuel),
//!   failure classification.
//! * [`PolicyEngine`]: one shared wasmtime engine with the [`SandboxConfig`]
//!   (memory cap, [`Budget`] of fuel or an epoch deadline per call, a
//!   [`WorkBudget`] relative to the slot's built-in policies over recent
//!   calls, a [`RoundBudget`] over any window of rounds in fuel and time,
//!   a wall-clock backstop, limits on `log`, [`LoadLimits`] on what it
//!   compiles) and a compiled-module cache keyed by the SHA-256 of the
//!   bytes (each entry naming the module it was compiled from).
//!   [`PolicyEngine::load`] refuses anything but a component within the
//!   limits that exports each slot it implements once and imports at most
//!   `log`, each refusal a [`WasmError`] naming the module and the problem;
//!   then compiles it and makes a warm-up call per slot.
//! * Calls enter a module by one of two [`CallPath`]s: by default straight
//!   into the core module the component lifts its slot functions from, with
//!   the contract's canonical ABI done by the host (one entry per call when
//!   the component has the slot's 2.1 `-buffered` functions, three for a 2.0
//!   one), else through wasmtime's component runtime. Same code, same
//!   sandbox, same decisions and errors.
//! * [`PolicyModule::backend`] makes a backend of any slot, each with its own
//!   instance and configuration. Any failed call is a typed
//!   [`crate::policy::PolicyError`]; the failing instance is dropped and a
//!   fresh one is made for the next call, never reused. Hot swap, rollback,
//!   quarantine and fallback are the slot's, the same for native and Wasm
//!   policies ([`crate::policy`]).
//!
//! ```no_run
//! use gangway_core::wasm::{PolicyEngine, SandboxConfig};
//! use gangway_core::{Scheduler, Topology};
//! use gangway_plugin_sdk::Fairness;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = PolicyEngine::new(SandboxConfig::default())?;
//! let module = engine.load("fifo.wasm", &std::fs::read("fifo.wasm")?)?;
//! println!("{} implements {:?} (contract {})", module.name(), module.slots(), module.contract_version());
//!
//! let mut sched = Scheduler::new(Topology::uniform(4, 8, 8)?);
//! let handle = sched.policies().slot::<Fairness>().handle();
//! handle.stage(module.backend::<Fairness>(b"")?); // active from the next round on
//! let report = sched.round(0)?;
//! assert!(report.policy_errors.is_empty());
//! # Ok(())
//! # }
//! ```

mod backend;
mod config;
mod contract;
mod direct;
mod disk_cache;
mod engine;
mod entry;
mod error;
mod live;
mod module;
mod restore;
mod spending;
mod store;
mod twins;
mod warm_up;
mod wiring;
mod work;

pub use config::{
    Budget, CallPath, LoadLimits, RoundBudget, SandboxConfig, WorkBudget, set_signal_traps_default,
};
pub use contract::CONTRACT_VERSION;
pub use engine::PolicyEngine;
pub use error::{WasmError, WasmErrorKind};
pub use module::PolicyModule;
pub use store::LogCounts;
