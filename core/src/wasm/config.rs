//! How a policy is boxed in: memory cap, CPU budget, stack, log limits.

use std::time::Duration;

/// The CPU budget of one policy call.
///
/// The host chooses per engine: fuel is deterministic (the same module, view
/// and budget always stop at the same instruction), so replays reproduce
/// exactly; a deadline bounds wall-clock time, which is what a live host
/// cares about, at the price of determinism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// At most this many fuel units (roughly one per Wasm instruction) per call.
    Fuel(u64),
    /// At most this much wall-clock time per call, enforced by epoch
    /// interruption; the engine runs a ticker thread while it is alive.
    Deadline(Duration),
}

impl Budget {
    /// The default fuel budget: about 0.2 s of straight-line Wasm, some
    /// hundred times what one call of a built-in policy over 1,000-1,600 jobs
    /// uses (1-3 million units).
    pub const DEFAULT_FUEL: u64 = 200_000_000;
}

impl Default for Budget {
    fn default() -> Self {
        Budget::Fuel(Budget::DEFAULT_FUEL)
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Fuel(n) => write!(f, "{n} fuel units per call"),
            Budget::Deadline(d) => write!(f, "{} ms per call", d.as_millis()),
        }
    }
}

/// The sandbox every policy instance of one [`super::PolicyEngine`] runs in.
///
/// ```
/// use gangway_core::wasm::{Budget, SandboxConfig};
/// use std::time::Duration;
///
/// let live = SandboxConfig {
///     budget: Budget::Deadline(Duration::from_millis(20)),
///     ..SandboxConfig::default()
/// };
/// assert_eq!(live.memory_bytes, 64 << 20);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The most linear memory one instance may have, in bytes. Growing past
    /// it traps the call with [`crate::policy::PolicyErrorKind::MemoryLimit`].
    pub memory_bytes: u64,
    /// The CPU budget of each call (and of instantiation plus `init`).
    pub budget: Budget,
    /// The most Wasm stack one call may use, in bytes (deep recursion traps).
    pub stack_bytes: usize,
    /// The most `log` messages one call may send; further ones are dropped.
    pub log_messages_per_call: u32,
    /// Log messages longer than this many bytes are truncated.
    pub log_message_bytes: usize,
    /// How calls enter a module.
    pub call_path: CallPath,
}

/// How the host enters a policy's code on each call.
///
/// Both paths run the same code in the same sandbox and give the same
/// decisions; they differ in what a call costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallPath {
    /// Straight into the component's main core module, with the contract's
    /// canonical ABI done by the host (a few times cheaper per call), for
    /// components of the standard shape: the one wit-bindgen and
    /// wit-component (or `cargo component`) produce, whose main core module
    /// exports the slot functions under their canonical names and imports at
    /// most `log`. Other components run through the component runtime.
    #[default]
    Direct,
    /// Always through wasmtime's component runtime.
    Component,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            memory_bytes: 64 << 20,
            budget: Budget::default(),
            stack_bytes: 512 << 10,
            log_messages_per_call: 16,
            log_message_bytes: 1024,
            call_path: CallPath::default(),
        }
    }
}
