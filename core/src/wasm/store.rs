//! One instance's store: its limits (a memory cap for the whole instance,
//! small caps on tables and instances), its `log` accounting, and how a
//! failure in it is classified.

// Sizes here come from the guest: no wrapping arithmetic, no `as` casts.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use wasmtime::{ResourceLimiter, Store, Trap};

use super::config::{Budget, SandboxConfig};
use super::contract::bounded;
use crate::policy::PolicyErrorKind;

/// Per-store host state: the limiter and log accounting.
pub(crate) struct HostState {
    limits: Limits,
    /// The module's name, for log records.
    pub(crate) module: Arc<str>,
    /// Messages the current call may still have kept.
    pub(crate) logs_left: u32,
    /// Bytes of messages the current call may still have kept.
    pub(crate) log_bytes_left: usize,
    /// The longest message kept.
    pub(crate) log_bytes: usize,
    /// What the backend's instances logged, against its limits.
    pub(crate) book: Arc<LogBook>,
    /// Fuel one `log` call costs besides its bytes (0 without fuel metering).
    log_call_fuel: u64,
    /// Whether calls are metered in fuel.
    metered: bool,
    /// Whether the guest may call `log` now: not from inside `cabi_realloc`
    /// or a post-return function (the canonical ABI forbids it; the direct
    /// call path enforces it as the component runtime does).
    pub(crate) may_leave: bool,
    /// The current call's log messages (`level: text`), when the host
    /// compares them (the conformance kit's twin check); `None`: not kept.
    pub(crate) captured: Option<Vec<String>>,
}

impl HostState {
    /// The state of a new store for `module` under `config`, its logs kept
    /// in `book`.
    pub(crate) fn new(module: &str, config: &SandboxConfig, book: Arc<LogBook>) -> HostState {
        HostState {
            limits: Limits {
                memory_cap: config.memory_bytes,
                memory: 0,
                table_elements: 0,
                instances: usize::try_from(config.limits.core_instances).unwrap_or(usize::MAX),
            },
            module: Arc::from(module),
            logs_left: config.log_messages_per_call,
            log_bytes_left: config.log_bytes_per_call,
            log_bytes: config.log_message_bytes,
            book,
            log_call_fuel: match config.budget {
                Budget::Fuel(_) => config.log_call_fuel,
                Budget::Deadline(_) => 0,
            },
            metered: matches!(config.budget, Budget::Fuel(_)),
            may_leave: true,
            captured: None,
        }
    }
}

/// A new store for `module` with the limiter installed, the budget
/// mechanism armed as `config` says, and its logs kept in `book`.
pub(crate) fn new_store(
    engine: &wasmtime::Engine,
    module: &str,
    config: &SandboxConfig,
    book: Arc<LogBook>,
) -> Store<HostState> {
    let mut store = Store::new(engine, HostState::new(module, config, book));
    store.limiter(|s| &mut s.limits);
    if matches!(config.budget, Budget::Deadline(_)) || config.wall_clock_cap.is_some() {
        store.epoch_deadline_trap();
    }
    store
}

/// How many `log` messages modules sent, kept and dropped past the limits
/// ([`SandboxConfig::log_messages_per_call`] and the others), with their
/// bytes (a kept message's bytes as kept, a dropped one's as sent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogCounts {
    /// Messages kept (passed to `tracing`).
    pub kept: u64,
    /// Their bytes.
    pub kept_bytes: u64,
    /// Messages dropped past a limit.
    pub dropped: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
}

impl LogCounts {
    /// What was logged since `earlier` (counts taken before).
    pub fn since(&self, earlier: &LogCounts) -> LogCounts {
        LogCounts {
            kept: self.kept.saturating_sub(earlier.kept),
            kept_bytes: self.kept_bytes.saturating_sub(earlier.kept_bytes),
            dropped: self.dropped.saturating_sub(earlier.dropped),
            dropped_bytes: self.dropped_bytes.saturating_sub(earlier.dropped_bytes),
        }
    }
}

/// [`LogCounts`] shared across threads.
#[derive(Debug, Default)]
pub(crate) struct LogTally {
    kept: AtomicU64,
    kept_bytes: AtomicU64,
    dropped: AtomicU64,
    dropped_bytes: AtomicU64,
}

impl LogTally {
    fn count(&self, kept: bool, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let (n, b) = if kept {
            (&self.kept, &self.kept_bytes)
        } else {
            (&self.dropped, &self.dropped_bytes)
        };
        n.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> LogCounts {
        LogCounts {
            kept: self.kept.load(Ordering::Relaxed),
            kept_bytes: self.kept_bytes.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            dropped_bytes: self.dropped_bytes.load(Ordering::Relaxed),
        }
    }
}

/// What one backend's instances logged, against the backend's limits
/// ([`SandboxConfig::log_messages_per_backend`],
/// [`SandboxConfig::log_bytes_per_backend`]), and the engine's tally.
#[derive(Debug)]
pub(crate) struct LogBook {
    messages_left: AtomicU64,
    bytes_left: AtomicU64,
    limits: (u64, u64),
    warned: AtomicBool,
    engine: Arc<LogTally>,
}

impl LogBook {
    /// A backend's book under `config`, counting into `engine` too.
    pub(crate) fn new(config: &SandboxConfig, engine: Arc<LogTally>) -> LogBook {
        let limits = (
            config.log_messages_per_backend,
            config.log_bytes_per_backend,
        );
        LogBook {
            messages_left: AtomicU64::new(limits.0),
            bytes_left: AtomicU64::new(limits.1),
            limits,
            warned: AtomicBool::new(false),
            engine,
        }
    }

    /// A new period: the backend's limits hold afresh.
    pub(crate) fn renew(&self) {
        self.messages_left.store(self.limits.0, Ordering::Relaxed);
        self.bytes_left.store(self.limits.1, Ordering::Relaxed);
        self.warned.store(false, Ordering::Relaxed);
    }

    /// Whether the backend may have `bytes` more bytes kept in one more
    /// message (and takes them).
    fn take(&self, bytes: u64) -> bool {
        let messages = self.messages_left.load(Ordering::Relaxed);
        let left = self.bytes_left.load(Ordering::Relaxed);
        let (Some(messages), Some(left)) = (messages.checked_sub(1), left.checked_sub(bytes))
        else {
            return false;
        };
        self.messages_left.store(messages, Ordering::Relaxed);
        self.bytes_left.store(left, Ordering::Relaxed);
        true
    }
}

/// Whether the call may have one more message of `len` bytes (as sent)
/// kept: within the call's messages and bytes and the backend's. Counts it
/// as kept or dropped; says once when a backend's limits are reached.
pub(crate) fn take_log_slot(state: &mut HostState, len: usize) -> bool {
    let kept_len = len.min(state.log_bytes);
    let keep = state.logs_left > 0
        && state.log_bytes_left >= kept_len
        && state.book.take(u64::try_from(kept_len).unwrap_or(u64::MAX));
    if keep {
        state.logs_left = state.logs_left.saturating_sub(1);
        state.log_bytes_left = state.log_bytes_left.saturating_sub(kept_len);
        state.book.engine.count(true, kept_len);
        return true;
    }
    state.book.engine.count(false, len);
    let book = &state.book;
    let spent = book.messages_left.load(Ordering::Relaxed) == 0
        || book.bytes_left.load(Ordering::Relaxed) < u64::try_from(kept_len).unwrap_or(u64::MAX);
    if spent && !book.warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            module = &*state.module,
            "the module's log messages past {} messages or {} bytes are dropped from now on \
             (counted in the run's report)",
            book.limits.0,
            book.limits.1
        );
    }
    false
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
    store: T,
    bytes: usize,
) -> wasmtime::Result<()> {
    let data = store.as_context().data();
    if !data.metered {
        return Ok(());
    }
    let cost = data.log_call_fuel;
    charge(
        store,
        cost.saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX)),
    )
}

/// Charges the host's reading of `bytes` bytes of the guest's (a refusal's
/// text) to the call's fuel, one unit a byte, before it reads them; out of
/// fuel traps as the guest's own code would.
pub(crate) fn charge_read<T: wasmtime::AsContextMut<Data = HostState>>(
    store: T,
    bytes: usize,
) -> wasmtime::Result<()> {
    if !store.as_context().data().metered {
        return Ok(());
    }
    charge(store, u64::try_from(bytes).unwrap_or(u64::MAX))
}

/// Takes `cost` from the call's fuel.
fn charge<T: wasmtime::AsContextMut<Data = HostState>>(
    mut store: T,
    cost: u64,
) -> wasmtime::Result<()> {
    let mut ctx = store.as_context_mut();
    let left = ctx.get_fuel()?;
    let Some(rest) = left.checked_sub(cost) else {
        ctx.set_fuel(0)?;
        return Err(Trap::OutOfFuel.into());
    };
    ctx.set_fuel(rest)?;
    Ok(())
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
        // The component runtime copies at most the bytes the entry has
        // fuel for (`arm`): past them, it ran out of fuel as the direct
        // path's charge before reading does. (wasmtime's error type for it
        // is private; its message is not.)
        None if error_text(e).contains(HOSTCALL_FUEL_EXHAUSTED) => {
            PolicyErrorKind::OutOfFuel(match config.budget {
                Budget::Fuel(n) => n,
                Budget::Deadline(_) => 0,
            })
        }
        None => PolicyErrorKind::Abi(error_text(e)),
    }
}

/// How wasmtime says a lift would copy more bytes than allowed.
const HOSTCALL_FUEL_EXHAUSTED: &str =
    "too much data is being copied between the host and the guest";

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
