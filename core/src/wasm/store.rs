//! One instance's store: its limits (a memory cap for the whole instance,
//! small caps on tables and instances), its `log` accounting, and how a
//! failure in it is classified.

// Sizes here come from the guest: no wrapping arithmetic, no `as` casts.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use std::sync::Arc;

use wasmtime::{ResourceLimiter, Store, Trap};

use super::config::{Budget, SandboxConfig};
use super::contract::bounded;
use crate::policy::PolicyErrorKind;

/// Per-store host state: the limiter and log accounting.
pub(crate) struct HostState {
    limits: Limits,
    /// The module's name, for log records.
    pub(crate) module: Arc<str>,
    /// Messages the current call may still log.
    pub(crate) logs_left: u32,
    /// The longest message kept.
    pub(crate) log_bytes: usize,
    /// Fuel one `log` call costs besides its bytes (0 without fuel metering).
    log_call_fuel: u64,
    /// Whether the guest may call `log` now: not from inside `cabi_realloc`
    /// or a post-return function (the canonical ABI forbids it; the direct
    /// call path enforces it as the component runtime does).
    pub(crate) may_leave: bool,
    /// The current call's log messages (`level: text`), when the host
    /// compares them (the conformance kit's twin check); `None`: not kept.
    pub(crate) captured: Option<Vec<String>>,
}

impl HostState {
    /// The state of a new store for `module` under `config`.
    pub(crate) fn new(module: &str, config: &SandboxConfig) -> HostState {
        HostState {
            limits: Limits {
                memory_cap: config.memory_bytes,
                memory: 0,
                table_elements: 0,
                instances: usize::try_from(config.limits.core_instances).unwrap_or(usize::MAX),
            },
            module: Arc::from(module),
            logs_left: config.log_messages_per_call,
            log_bytes: config.log_message_bytes,
            log_call_fuel: match config.budget {
                Budget::Fuel(_) => config.log_call_fuel,
                Budget::Deadline(_) => 0,
            },
            may_leave: true,
            captured: None,
        }
    }
}

/// A new store for `module` with the limiter installed and the budget
/// mechanism armed as `config` says.
pub(crate) fn new_store(
    engine: &wasmtime::Engine,
    module: &str,
    config: &SandboxConfig,
) -> Store<HostState> {
    let mut store = Store::new(engine, HostState::new(module, config));
    store.limiter(|s| &mut s.limits);
    if matches!(config.budget, Budget::Deadline(_)) || config.wall_clock_cap.is_some() {
        store.epoch_deadline_trap();
    }
    store
}

/// The memory cap for the instance as a whole, and caps on tables.
struct Limits {
    memory_cap: u64,
    /// Bytes of linear memory the instance has (all memories).
    memory: u64,
    /// Table elements the instance has (all tables).
    table_elements: u64,
    /// The most core instances a component may create
    /// ([`super::LoadLimits::core_instances`]).
    instances: usize,
}

/// Most table elements an instance may have, all tables together.
const TABLE_ELEMENTS: u64 = 100_000;

/// The error a `memory.grow` past the cap traps with.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {cap} bytes hit (the instance asked for {desired} bytes)")]
pub(crate) struct MemoryCapHit {
    cap: u64,
    desired: u64,
}

/// `total` after one of its parts grows from `current` to `desired`
/// (guest-driven sizes: saturating, never wrapping).
fn grown(total: u64, current: usize, desired: usize) -> u64 {
    let size = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    total
        .saturating_sub(size(current))
        .saturating_add(size(desired))
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Called for a memory's first allocation too (current = 0), so the
        // sum covers every memory of the instance.
        let total = grown(self.memory, current, desired);
        if total > self.memory_cap {
            return Err(MemoryCapHit {
                cap: self.memory_cap,
                desired: total,
            }
            .into());
        }
        self.memory = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = grown(self.table_elements, current, desired);
        if total > TABLE_ELEMENTS {
            return Ok(false);
        }
        self.table_elements = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        // One per core instance of a standard component; the features a
        // policy may use allow no second memory in a module.
        16
    }
}

/// Charges one `log` call of `bytes` bytes to the call's fuel (the host's
/// work for the guest); out of fuel traps as the guest's own code would.
pub(crate) fn charge_log<T: wasmtime::AsContextMut<Data = HostState>>(
    mut store: T,
    bytes: usize,
) -> wasmtime::Result<()> {
    let cost = store.as_context().data().log_call_fuel;
    if cost == 0 {
        return Ok(());
    }
    let cost = cost.saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
    let mut ctx = store.as_context_mut();
    let left = ctx.get_fuel()?;
    let Some(rest) = left.checked_sub(cost) else {
        ctx.set_fuel(0)?;
        return Err(Trap::OutOfFuel.into());
    };
    ctx.set_fuel(rest)?;
    Ok(())
}

/// Whether the call may log one more message (and counts it).
pub(crate) fn take_log_slot(state: &mut HostState) -> bool {
    match state.logs_left.checked_sub(1) {
        Some(left) => {
            state.logs_left = left;
            true
        }
        None => false,
    }
}

/// Forwards one `log` message (already bounded) to `tracing`.
pub(crate) fn record_log(state: &mut HostState, level: &str, message: &str) {
    let module = &*state.module;
    let message = bounded(message, state.log_bytes);
    match level {
        "error" => tracing::error!(module, "{message}"),
        "warn" => tracing::warn!(module, "{message}"),
        "debug" => tracing::debug!(module, "{message}"),
        _ => tracing::info!(module, "{message}"),
    }
    if let Some(captured) = state.captured.as_mut() {
        captured.push(format!("{level}: {message}"));
    }
}

/// What kind of failure a wasmtime error is, under `config`.
pub(crate) fn classify(e: &wasmtime::Error, config: &SandboxConfig) -> PolicyErrorKind {
    if e.downcast_ref::<MemoryCapHit>().is_some() {
        return PolicyErrorKind::MemoryLimit(config.memory_bytes);
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => PolicyErrorKind::OutOfFuel(match config.budget {
            Budget::Fuel(n) => n,
            Budget::Deadline(_) => 0,
        }),
        Some(Trap::Interrupt) => PolicyErrorKind::DeadlineExceeded(match config.budget {
            Budget::Deadline(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            Budget::Fuel(_) => config
                .wall_clock_cap
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }),
        Some(trap) => {
            let text = trap.to_string();
            PolicyErrorKind::Trap(
                text.strip_prefix("wasm trap: ")
                    .unwrap_or(&text)
                    .to_string(),
            )
        }
        None => PolicyErrorKind::Abi(error_text(e)),
    }
}

/// wasmtime's error with its causes, on one line.
pub(crate) fn error_text(e: &wasmtime::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
