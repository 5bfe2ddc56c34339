//! Diagnostics from a policy to its host: the contract's only import.

/// How important a log message is (the WIT `log.level` enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Something is wrong with the policy's inputs or configuration.
    Error,
    /// Suspicious but handled.
    Warn,
    /// Normal operation.
    Info,
    /// Detail for policy authors.
    Debug,
}

/// Sends a message to the host's log.
///
/// Inside a Wasm component exported with [`export!`](crate::export) this
/// calls the `gangway:policy/log` import, which the host may rate-limit or
/// truncate. Natively (tests, or a policy linked into the host) it does
/// nothing: a native host observes its policies directly.
///
/// ```
/// gangway_plugin_sdk::log(gangway_plugin_sdk::LogLevel::Info, "hello");
/// ```
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::guest::emit(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (level, message);
}
