//! `policy-check`: load a policy module under the sandbox and put every slot
//! it implements through the conformance kit ([`gangway_core::conformance`]):
//! every contract rule on many generated views, determinism, a time bound
//! per job, and scheduler scenarios. The same implementation serves policy
//! authors' own tests.
//!
//! ```
//! use gangway_catalog::policy_check::{CheckOptions, check_module};
//!
//! let fifo = gangway_plugin_artifacts::module("fifo").unwrap();
//! let report = check_module("fifo.wasm", fifo, b"", &CheckOptions { views: 20, ..CheckOptions::default() }).unwrap();
//! assert_eq!(report.contract_version, "2.1.0");
//! assert_eq!(report.call_path, gangway_core::wasm::CallPath::Direct);
//! assert_eq!(report.buffered_slots, vec![gangway_core::Slot::Fairness]);
//! assert!(report.calls >= 40);
//! ```

use std::time::{Duration, Instant};

use gangway_core::Slot;
use gangway_core::conformance::{self, Finding, Options};
use gangway_core::wasm::{Budget, CallPath, LogCounts, PolicyEngine, SandboxConfig, WasmError};

/// How hard to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Generated views per slot.
    pub views: u32,
    /// Seed of the view generator.
    pub seed: u64,
    /// Scheduler scenarios per slot.
    pub scenarios: u32,
    /// The sandbox the module runs in (no call runs past the time limit:
    /// each call's epoch deadline is the time left).
    pub sandbox: SandboxConfig,
    /// Give up (and fail) after this long in total.
    pub time_limit: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            views: 300,
            seed: 1,
            scenarios: 8,
            sandbox: SandboxConfig {
                budget: Budget::Fuel(Budget::DEFAULT_FUEL),
                ..SandboxConfig::default()
            },
            time_limit: Duration::from_secs(30),
        }
    }
}

/// What a well-behaved module did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The module's name.
    pub module: String,
    /// The slots it implements.
    pub slots: Vec<Slot>,
    /// Its contract version.
    pub contract_version: String,
    /// How the host enters it: directly (a component of the standard shape)
    /// or through the component runtime.
    pub call_path: CallPath,
    /// The slots whose calls enter the guest once (contract 2.1's
    /// `-buffered` functions, on the direct path).
    pub buffered_slots: Vec<Slot>,
    /// Views given to each slot.
    pub views: usize,
    /// Calls made, all slots.
    pub calls: usize,
    /// The slowest call, in microseconds.
    pub slowest_us: u128,
    /// The most jobs in one view.
    pub max_jobs: usize,
    /// Calls of the history check (each slot's instance asked views it
    /// answered before, after its long history), all slots.
    pub history: usize,
    /// Scheduler scenarios run, all slots.
    pub scenarios: usize,
    /// The module's `log` messages, kept and dropped past the limits.
    pub logs: LogCounts,
}

/// Why a module is not well-behaved (or could not be checked).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The sandbox could not be created.
    #[error("{0}")]
    Engine(WasmError),
    /// The module was refused at load time.
    #[error("{0}")]
    Load(WasmError),
    /// A slot broke a contract rule.
    #[error("{0}")]
    Rule(Box<Finding>),
    /// The whole check took too long.
    #[error("module {module} is too slow: the check took more than {limit:?}")]
    TooSlow {
        /// The module.
        module: String,
        /// The limit.
        limit: Duration,
    },
}

impl CheckError {
    /// The error's first line: what `policy-check` prints.
    pub fn headline(&self) -> String {
        self.to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

/// Loads `bytes` as module `name`, configures every slot with `config` and
/// runs the conformance checks on each.
pub fn check_module(
    name: &str,
    bytes: &[u8],
    config: &[u8],
    options: &CheckOptions,
) -> Result<CheckReport, CheckError> {
    let started = Instant::now();
    // No call runs past the limit: each call's deadline is the time left.
    let sandbox = SandboxConfig {
        wall_clock_cap: Some(
            options
                .sandbox
                .wall_clock_cap
                .map_or(options.time_limit, |c| c.min(options.time_limit)),
        ),
        deadline_at: started.checked_add(options.time_limit),
        ..options.sandbox.clone()
    };
    let too_slow = || CheckError::TooSlow {
        module: name.to_string(),
        limit: options.time_limit,
    };
    let engine = PolicyEngine::new(sandbox).map_err(CheckError::Engine)?;
    let module = engine.load(name, bytes).map_err(CheckError::Load)?;
    let kit = Options {
        cases: options.views,
        seed: options.seed,
        scenarios: options.scenarios,
        time_limit: Some(options.time_limit),
        ..Options::default()
    };
    let reports = conformance::module(&module, config, &kit).map_err(|f| {
        // A call cut short by the limit fails as any missed deadline does:
        // past the limit, any finding is the limit's.
        if started.elapsed() >= options.time_limit {
            return too_slow();
        }
        match f.kind {
            conformance::FindingKind::OutOfTime(_) => too_slow(),
            _ => CheckError::Rule(Box::new(f)),
        }
    })?;
    if started.elapsed() > options.time_limit {
        return Err(too_slow());
    }
    Ok(CheckReport {
        module: name.to_string(),
        slots: module.slots(),
        contract_version: module.contract_version(),
        call_path: module.call_path(),
        buffered_slots: module.buffered_slots(),
        views: reports.iter().map(|r| r.views).min().unwrap_or(0),
        calls: reports.iter().map(|r| r.calls).sum(),
        slowest_us: reports.iter().map(|r| r.slowest_us).max().unwrap_or(0),
        max_jobs: reports.iter().map(|r| r.max_jobs).max().unwrap_or(0),
        history: reports.iter().map(|r| r.history).sum(),
        scenarios: reports.iter().map(|r| r.scenarios).sum(),
        logs: engine.log_counts(),
    })
}
