//! Logs a user can see: the `tracing` subscriber that `replay`,
//! `policy-check` and `gangway-slurm` install, writing to stderr.
//!
//! Without flags only warnings and errors show (a policy that fails and
//! falls back, a quarantine, a trace that names machines missing from the
//! machine list). `-v` adds info (swaps, policy modules' own `log` output at
//! info), `-vv` debug, `-vvv` trace. Without `-v`, `RUST_LOG` is honoured in
//! full (`RUST_LOG=gangway_core=debug,warn`).

use tracing_subscriber::EnvFilter;

/// The filter for `verbose` (the count of `-v` flags), else `RUST_LOG`,
/// else warnings only.
///
/// ```
/// assert_eq!(gangway_catalog::logging::filter(2).to_string(), "debug");
/// ```
pub fn filter(verbose: u8) -> EnvFilter {
    let level = match verbose {
        0 => return EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    EnvFilter::new(level)
}

/// Installs the subscriber for `verbose` (see [`filter`]); a second call, or
/// a subscriber the embedding program installed first, is left alone.
/// Colours only when stderr is a terminal (a log redirected to a file has
/// no escape codes).
pub fn init(verbose: u8) {
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter(verbose))
        .with_target(false)
        .try_init();
}
