//! How a policy is boxed in: memory cap, CPU budget, stack, log limits, and
//! the bounds on what a module may make the host compile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The CPU budget of one policy call.
///
/// The host chooses per engine: fuel is deterministic (the same module, view
/// and budget always stop at the same instruction), so replays reproduce
/// exactly; a deadline bounds wall-clock time, which is what a live host
/// cares about, at the price of determinism. Host work done for the guest
/// (copying and checking a `log` message or a refusal's text) is charged
/// to the fuel budget before the host does it, so neither budget can be
/// dodged by making the host work; what fuel cannot see (bulk memory
/// operations, page faults) the round budget's time bounds
/// ([`RoundBudget`]).
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

    /// The fuel budget of a call into a module that carries an interpreter
    /// (hosts that load with [`LoadLimits::for_interpreters`]): a hundred
    /// times [`Budget::DEFAULT_FUEL`]. A Python policy built with
    /// componentize-py runs its policy in CPython inside the sandbox and
    /// uses about that much more: about 200 million units for a
    /// fairness view of 2,000 jobs.
    pub const INTERPRETER_FUEL: u64 = 100 * Budget::DEFAULT_FUEL;

    /// The per-call fuel budget for modules held to `limits`:
    /// [`Budget::INTERPRETER_FUEL`] for [`LoadLimits::for_interpreters`],
    /// else [`Budget::DEFAULT_FUEL`].
    ///
    /// ```
    /// use gangway_core::wasm::{Budget, LoadLimits};
    /// assert_eq!(Budget::for_limits(&LoadLimits::default()), Budget::Fuel(Budget::DEFAULT_FUEL));
    /// assert_eq!(
    ///     Budget::for_limits(&LoadLimits::for_interpreters()),
    ///     Budget::Fuel(Budget::INTERPRETER_FUEL)
    /// );
    /// ```
    pub fn for_limits(limits: &LoadLimits) -> Budget {
        if limits.core_instances > LoadLimits::default().core_instances {
            Budget::Fuel(Budget::INTERPRETER_FUEL)
        } else {
            Budget::Fuel(Budget::DEFAULT_FUEL)
        }
    }
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

/// Bounds on a module, checked before it is compiled: compiling is the one
/// thing a module makes the host do that no call budget covers, and an
/// optimizing compiler's time grows faster than linearly with a function's
/// size and live locals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadLimits {
    /// The most bytes a module (the whole component) may have.
    pub module_bytes: usize,
    /// The most functions one core module may define.
    pub functions: u32,
    /// The most bytes one function's body may have.
    pub function_bytes: usize,
    /// The most locals one function may declare.
    pub locals: u32,
    /// The longest compilation may take; past it the load fails (the
    /// compiler thread is abandoned and finishes on its own).
    pub compile_time: Duration,
    /// The most core module instances a component may create (a Rust
    /// policy has 3 or 4; a Python policy built with componentize-py, whose
    /// interpreter is dynamically linked from many modules, about 40).
    pub core_instances: u32,
}

impl Default for LoadLimits {
    /// Generous for real policies (the built-in ones are 87-350 KB, with at
    /// most a few hundred locals in a function), far below what makes
    /// compilation slow: 4 MiB, 20,000 functions, 256 KiB per function,
    /// 2,000 locals per function, 30 s, 16 core instances.
    fn default() -> Self {
        LoadLimits {
            module_bytes: 4 << 20,
            functions: 20_000,
            function_bytes: 256 << 10,
            locals: 2_000,
            compile_time: Duration::from_secs(30),
            core_instances: 16,
        }
    }
}

impl LoadLimits {
    /// Bounds for policies that carry an interpreter, such as a Python
    /// policy built with componentize-py (CPython in about 18 MB, 10,600
    /// functions in its largest module, one of 430 KB, about 40 core
    /// instances; about 6 s to compile on two cores, once with the module
    /// cache): 64 MiB, 50,000 functions, 1 MiB per function, 4,000 locals,
    /// 300 s, 128 core instances. An operator opts into them (replay's
    /// `--large-policies`), as they let a module make the host compile for
    /// minutes.
    ///
    /// ```
    /// use gangway_core::wasm::LoadLimits;
    /// let large = LoadLimits::for_interpreters();
    /// assert!(large.module_bytes > LoadLimits::default().module_bytes);
    /// ```
    pub fn for_interpreters() -> Self {
        LoadLimits {
            module_bytes: 64 << 20,
            functions: 50_000,
            function_bytes: 1 << 20,
            locals: 4_000,
            compile_time: Duration::from_secs(300),
            core_instances: 128,
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
    /// The most memory one instance may have, in bytes: its linear memory
    /// and its tables together. Growing past it traps the call with
    /// [`crate::policy::PolicyErrorKind::MemoryLimit`]. (A policy has one
    /// linear memory: multi-memory is not among the features it may use.)
    pub memory_bytes: u64,
    /// The CPU budget of each call (and of instantiation plus `init`).
    pub budget: Budget,
    /// With a fuel budget, a wall-clock cap per call as well (epoch
    /// interruption), a backstop should fuel ever miss host work: `None`
    /// for none. Ignored with a deadline budget.
    pub wall_clock_cap: Option<Duration>,
    /// With a fuel budget, the most fuel one backend (a module serving one
    /// slot) may use over its whole life, everything counted: its calls,
    /// each instance's instantiation and `init`, the host's twin checks and
    /// the host's reading of its refusals and logs. No entry into the
    /// module is given more than what is left, so the bound is absolute;
    /// once it is spent every call fails with
    /// [`crate::policy::PolicyErrorKind::RunBudget`], so the slot's
    /// built-in policy decides and the guard quarantines the module. (A
    /// module's warm-up at load is a backend of its own, held to the same
    /// bound.) A bound on a whole replay for a policy slow within each
    /// call's budget; deterministic, as fuel is. `None`: no bound (the
    /// default).
    pub fuel_per_backend: Option<u64>,
    /// For a host that runs for days (the Slurm daemon): `fuel_per_backend`
    /// is allowed again in each period of this length of wall-clock time,
    /// counted from the backend's first call, so the bound is a rate
    /// (fuel per day) instead of a lifetime total. A module that used up
    /// one period's fuel is still quarantined by its guard (until the host
    /// swaps it). `None`: one allowance for the backend's life (the
    /// default, and what deterministic replays use).
    pub fuel_period: Option<Duration>,
    /// With a fuel budget, how much work a module may do relative to its
    /// slot's built-in policies over its recent calls (see [`WorkBudget`]):
    /// a module that burns more than half of each call's budget on every
    /// call is quarantined within a few calls. Deterministic, as fuel is. By default [`WorkBudget::default`];
    /// hosts loading modules with an interpreter use
    /// [`WorkBudget::for_limits`]; `None` turns it off (an absolute bound,
    /// `fuel_per_backend`, may still hold).
    pub work_budget: Option<WorkBudget>,
    /// No call runs past this instant: with epoch interruption on (a
    /// deadline budget or a `wall_clock_cap`), each call's deadline is at
    /// most the time left until it, and a call made after it fails at once
    /// with [`crate::policy::PolicyErrorKind::DeadlineExceeded`]. For a
    /// host with a limit on its whole work (`policy-check`'s time limit).
    /// `None`: no such instant (the default).
    pub deadline_at: Option<std::time::Instant>,
    /// The most Wasm stack one call may use, in bytes (deep recursion traps).
    pub stack_bytes: usize,
    /// A bound on what a module may cost the host over any window of
    /// rounds, in fuel and in time, whatever the views (see
    /// [`RoundBudget`]); `None`: none.
    pub round_budget: Option<RoundBudget>,
    /// The most `log` messages one call may send; further ones are dropped.
    pub log_messages_per_call: u32,
    /// The most bytes of `log` messages one call may have kept; a message
    /// past them is dropped.
    pub log_bytes_per_call: usize,
    /// The most `log` messages one backend (a module serving one slot) may
    /// have kept over its life (or each `fuel_period`); later ones are
    /// dropped and counted ([`super::PolicyEngine::log_counts`]), and a
    /// warning says so once.
    pub log_messages_per_backend: u64,
    /// The most bytes of `log` messages one backend may have kept over its
    /// life (or each `fuel_period`), as `log_messages_per_backend`.
    pub log_bytes_per_backend: u64,
    /// Log messages and refusal texts longer than this many bytes are
    /// truncated (only this many bytes are kept; the whole text is still
    /// charged and checked as UTF-8).
    pub log_message_bytes: usize,
    /// Fuel charged for each `log` call, besides one unit per byte of its
    /// message: the host's work on the guest's behalf. (A refusal's text
    /// costs one unit per byte as well, charged before the host reads it.)
    pub log_call_fuel: u64,
    /// How often, on average, a backend also gives a call's view to the
    /// slot's own function of a 2.1 module and compares its answer with
    /// the `-buffered` twin's: one call in this many (and the first),
    /// chosen by a generator seeded by [`SandboxConfig::seed`], so a module
    /// cannot tell which calls are checked. 0: never.
    pub twin_check_every: u64,
    /// The seed of the host's random choices (which calls' twins are
    /// checked): a host that reproduces runs passes its run's seed; the
    /// same seed, module and calls give the same choices.
    pub seed: u64,
    /// How calls enter a module.
    pub call_path: CallPath,
    /// Whether the direct path enters a slot of a 2.1 module once per call,
    /// through its `-buffered` functions (the default), or as the component
    /// runtime does, through the slot's own functions (three entries: the
    /// view's allocation, the call, freeing the reply). The contract has a
    /// module's twins answer alike; a module whose twins disagree answers
    /// on the direct path as the component runtime does only without them.
    pub buffered_calls: bool,
    /// Bounds on the modules this engine compiles.
    pub limits: LoadLimits,
    /// Where compiled modules are kept across processes (`None`: nowhere,
    /// every process compiles its modules again). By default
    /// `$GANGWAY_MODULE_CACHE`, else `$XDG_CACHE_HOME/gangway/modules`,
    /// else `~/.cache/gangway/modules`; `GANGWAY_MODULE_CACHE=off` turns it
    /// off. An entry is used only if it is whole and made by an engine
    /// configured as this one; anything else is compiled again. A folder
    /// (or a folder above it) another user could write, or an entry, is
    /// not used, with a warning, as ssh refuses such keys
    /// ([`PolicyEngine::module_cache_refused`](super::PolicyEngine::module_cache_refused)).
    pub module_cache: Option<std::path::PathBuf>,
    /// Whether compiled code relies on the process's signal handlers for
    /// traps (out-of-bounds memory through guard pages, `unreachable`,
    /// division by zero), as wasmtime does by default, or checks
    /// explicitly. Signal handlers belong to the whole process: a library
    /// loaded later that installs its own without chaining (Ray's driver
    /// does, for SIGILL and SIGSEGV) would turn a guest's trap into the
    /// death of the host. Hosts that cannot rule that out turn it off
    /// ([`set_signal_traps_default`]; the Python package does), at some
    /// cost in guest speed. By default the process-wide setting, `true`
    /// unless changed.
    pub signal_traps: bool,
}

/// The process-wide default of [`SandboxConfig::signal_traps`].
static SIGNAL_TRAPS: AtomicBool = AtomicBool::new(true);

/// Sets whether engines whose configuration starts from
/// [`SandboxConfig::default`] from now on rely on signal handlers for
/// traps (see [`SandboxConfig::signal_traps`]). A host embedded in a
/// process whose signal handlers it does not own (Python, a JVM) calls it
/// with `false` before making its first engine.
///
/// ```
/// use gangway_core::wasm::{SandboxConfig, set_signal_traps_default};
/// set_signal_traps_default(false);
/// assert!(!SandboxConfig::default().signal_traps);
/// set_signal_traps_default(true);
/// assert!(SandboxConfig::default().signal_traps);
/// ```
pub fn set_signal_traps_default(enabled: bool) {
    SIGNAL_TRAPS.store(enabled, Ordering::Relaxed);
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
    /// wit-component (or `cargo component`) produce, whose slot functions are
    /// lifted from one core module that exports them under their canonical
    /// names and imports at most `log`. Other components run through the
    /// component runtime.
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
            wall_clock_cap: Some(Duration::from_secs(10)),
            fuel_per_backend: None,
            fuel_period: None,
            work_budget: Some(WorkBudget::default()),
            round_budget: Some(RoundBudget::default()),
            deadline_at: None,
            stack_bytes: 512 << 10,
            log_messages_per_call: 16,
            log_bytes_per_call: 4 << 10,
            log_messages_per_backend: 1_000,
            log_bytes_per_backend: 64 << 10,
            log_message_bytes: 1024,
            log_call_fuel: 10_000,
            twin_check_every: 64,
            seed: 0,
            call_path: CallPath::default(),
            buffered_calls: true,
            limits: LoadLimits::default(),
            module_cache: super::disk_cache::default_folder(),
            signal_traps: SIGNAL_TRAPS.load(Ordering::Relaxed),
        }
    }
}

/// How much work a module may do relative to its slot's built-in policies
/// ([`gangway_plugin_sdk::SlotContract::WORK`]): over its last `window`
/// calls, at most `factor` times what the built-ins would have cost on the
/// same views, each call counted as at least `floor` (small views cost
/// little, and a module written in another language has fixed costs of
/// its own). A call may use what the window has left, up to the per-call
/// [`super::Budget`]; a call that finds nothing left fails at once with
/// [`crate::policy::PolicyErrorKind::WorkBudget`], and so does one that
/// runs out of what was left. Failed calls count what they used.
///
/// The default (20x over 32 calls, each counted as at least 100,000 units:
/// about 0.1 ms of guest CPU here) leaves room for a module twenty times
/// slower than the built-ins on average, and several hundred times slower
/// on single calls after cheap ones; a module that burns the whole
/// per-call budget (0.2 s) on every call fails its first call after a few
/// milliseconds.
///
/// ```
/// use gangway_core::wasm::{LoadLimits, WorkBudget};
/// assert_eq!(WorkBudget::default().factor, 20);
/// assert_eq!(WorkBudget::for_limits(&LoadLimits::for_interpreters()).factor, 2_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkBudget {
    /// How many times the built-ins' cost a module may use over the window.
    pub factor: u64,
    /// How many recent calls the allowance is counted over.
    pub window: u32,
    /// The least a call counts as, in fuel units.
    pub floor: u64,
}

impl WorkBudget {
    /// The factor for modules that carry an interpreter (a Python policy
    /// built with componentize-py runs its policy in CPython inside the
    /// sandbox: about a hundred times the fuel of the same policy in Rust),
    /// a hundred times the default, as their per-call budget is.
    pub const INTERPRETER_FACTOR: u64 = 100;

    /// The work budget for modules held to `limits`: the default, or a
    /// hundred times its factor for [`LoadLimits::for_interpreters`].
    pub fn for_limits(limits: &LoadLimits) -> WorkBudget {
        let default = WorkBudget::default();
        if limits.core_instances > LoadLimits::default().core_instances {
            WorkBudget {
                factor: default.factor * WorkBudget::INTERPRETER_FACTOR,
                ..default
            }
        } else {
            default
        }
    }
}

impl Default for WorkBudget {
    fn default() -> Self {
        WorkBudget {
            factor: 20,
            window: 32,
            floor: 100_000,
        }
    }
}

impl WorkBudget {
    /// The most one call of a module is measured at under a per-call fuel
    /// budget of `per_call` units: a two-`factor`th of it (5 million units
    /// at the defaults), so what a call may use averages at most half the
    /// per-call budget over any window, whatever the views. A module that
    /// burns the whole per-call fuel on every call runs out of its work
    /// budget at least every second call.
    pub fn most_measured(&self, per_call: u64) -> u64 {
        (per_call / self.factor.max(1).saturating_mul(2)).max(self.floor)
    }
}

/// A bound on what a module may cost the host over any window of rounds,
/// whatever it does in its calls and however large its views: at most
/// `fuel` units and `time` of wall-clock time over any `rounds` consecutive
/// rounds (a round in which a slot is not called counts, and so does each
/// call outside a scheduler's rounds). An engine whose per-call fuel budget
/// is `k` times [`Budget::DEFAULT_FUEL`] (modules with an interpreter get a
/// hundred times) allows `k` times the fuel and the time
/// ([`RoundBudget::scaled`]). Everything the module makes the host do is
/// counted: its calls, the instantiation and `init` of each fresh
/// instance, the host's twin checks, the host reading its replies,
/// refusals and logs. An entry into the module may use what the window has
/// left (its epoch deadline is the time left, to within an epoch tick); a
/// call that finds either spent fails at once with
/// [`crate::policy::PolicyErrorKind::RoundBudget`], so a scheduler's guard
/// quarantines the module within three calls.
///
/// Fuel is deterministic and binds first for code that computes; time
/// catches what fuel does not see (the host's work for the module, bulk
/// memory operations, page faults). A round is held up by at most `time`
/// plus one epoch tick per slot, and a run of `n` rounds by at most about
/// `n / rounds` times `time` per slot.
///
/// ```
/// use gangway_core::wasm::{Budget, RoundBudget};
/// use std::time::Duration;
/// let b = RoundBudget::default();
/// assert_eq!(b.rounds, 100);
/// let (fuel, time) = b.scaled(&Budget::Fuel(Budget::INTERPRETER_FUEL));
/// assert_eq!((fuel, time), (100 * b.fuel, 100 * b.time));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundBudget {
    /// How many consecutive rounds the bound holds over.
    pub rounds: u32,
    /// The most fuel over the window, at the default per-call budget.
    pub fuel: u64,
    /// The most wall-clock time over the window, at the default per-call
    /// budget.
    pub time: Duration,
}

impl Default for RoundBudget {
    /// 100 rounds, 2x10^9 fuel units (ten calls' per-call fuel) and 250 ms
    /// (the costliest built-in, `gandiva`, used at most 1.03x10^9 units and
    /// 78 ms over 100 rounds in the heaviest replays measured: see
    /// `docs/performance.md`, "Policy budgets").
    fn default() -> Self {
        RoundBudget {
            rounds: 100,
            fuel: 2_000_000_000,
            time: Duration::from_millis(250),
        }
    }
}

impl RoundBudget {
    /// The fuel and time over the window under the per-call `budget`: as
    /// given for [`Budget::DEFAULT_FUEL`] or a deadline, scaled by how many
    /// times that a larger fuel budget is.
    pub fn scaled(&self, budget: &Budget) -> (u64, Duration) {
        let k = match budget {
            Budget::Fuel(n) => (n / Budget::DEFAULT_FUEL).max(1),
            Budget::Deadline(_) => 1,
        };
        let k32 = u32::try_from(k).unwrap_or(u32::MAX);
        (self.fuel.saturating_mul(k), self.time.saturating_mul(k32))
    }
}

impl std::fmt::Display for RoundBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} fuel units and {} ms over any {} rounds",
            self.fuel,
            self.time.as_millis(),
            self.rounds
        )
    }
}

impl std::fmt::Display for WorkBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x its slot's built-in policies over its last {} calls",
            self.factor, self.window
        )
    }
}
