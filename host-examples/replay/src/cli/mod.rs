//! The `replay` command line: argument parsing (here), input loading
//! (`inputs.rs`), runs and outputs (`run.rs`).

use std::path::PathBuf;

use clap::Parser;
use gangway_core::{PlacementStrategy, RackGrouping, TopologyError};

use crate::cluster_shape::ClusterSpec;
use crate::plots::PlotError;
use crate::sim::{self, SimError};
use crate::trace::{Format, TraceError};
use gangway_catalog::resolve::{self as policies, PolicyResolveError};
use gangway_catalog::slot_flags::{PolicyOrModule, SlotFlags};
use gangway_catalog::{PolicyChoice, SlotChoice};

mod inputs;
mod quotas;
mod run;

pub use inputs::{DEFAULT_GENERATED_JOBS, DEFAULT_GENERATED_TIME_SCALE, WARM_LEAD_DAYS};
pub use quotas::{HELIOS_GPUS_PER_NODE, HELIOS_VC_FILE, Quotas, demand_quotas, quotas};
pub use run::{Watched, jobs_csv, run, run_observed};

/// Replays a GPU-cluster job trace through Gangway's scheduler and policies.
///
/// With no arguments: a built-in Philly-calibrated workload (12,000 jobs,
/// started warm, arriving at the study's load: about 4.7 days) on a
/// Philly-sized cluster (3,205 GPUs), with the `philly` preset as Wasm
/// modules: both kinds of queueing delay occur and quotas bind.
#[derive(Debug, Parser)]
#[command(name = "replay", version, about)]
pub struct Cli {
    /// The job trace; without it the built-in generator makes one.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// The trace's format.
    #[arg(long, value_enum, default_value = "philly", requires = "trace")]
    pub format: Format,
    /// Real VC labels for an RFold trace: the AdaptDL file
    /// (`adaptdl_philly.csv`), joined on submit time and GPU count; jobs
    /// without a match keep a VC drawn from the study's per-VC mix.
    #[arg(long, requires = "trace")]
    pub vcs: Option<PathBuf>,
    /// Gavel's throughput table (`simulation_throughputs.json`): with it, a
    /// job whose trace measures its work in steps (`--format gavel`) runs
    /// at its GPU type's speed, only on types where it runs at all. Every
    /// GPU type of the cluster must be in the table.
    #[arg(long, value_name = "FILE")]
    pub throughputs: Option<PathBuf>,
    /// A Philly machine list (CSV); without it the built-in Philly machine mix.
    #[arg(long, conflicts_with = "topology")]
    pub machines: Option<PathBuf>,
    /// A uniform cluster: `SERVERSxGPUS` (one rack, e.g. `311x8`) or
    /// `RACKSxSERVERSxGPUS` (e.g. `4x8x8`); or parts of several GPU types,
    /// each a shape and its type, `TYPE` or `TYPE@GB` (e.g.
    /// `300x1:k80,300x1:p100,300x1:v100@32`).
    #[arg(long, conflicts_with_all = ["machines", "topology"])]
    pub cluster: Option<ClusterSpec>,
    /// How machines of `--machines` form racks: `same-sku` (machines with
    /// the same GPU count share racks) or `consecutive` (consecutive machine
    /// ids fill racks).
    #[arg(long, default_value = "same-sku",
          value_parser = clap::builder::PossibleValuesParser::new(RackGrouping::NAMES))]
    pub rack_grouping: String,
    /// Servers per rack for `--machines`.
    #[arg(long, default_value_t = 32)]
    pub rack_size: u32,
    /// A topology file (TOML) naming racks and servers.
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// A preset (a named policy per slot), optionally with slots replaced
    /// or configured: `philly`, `philly+retry=failure-aware+reclaim=none`,
    /// `philly+fairness=las@las.toml`.
    #[arg(long, conflicts_with = "compare")]
    pub policies: Option<String>,
    /// One flag per slot (`--fairness`, `--locality`, `--gang`,
    /// `--reclaim`, `--retry`, `--defragment`): a built-in name or a
    /// `.wasm` module, replacing the preset's.
    #[command(flatten)]
    pub slots: SlotFlags<PolicyOrModule>,
    /// A configuration file for a slot, e.g. `--config fairness=vcs.toml`
    /// (repeatable), for every policy set; an entry's own
    /// `SLOT=POLICY@FILE` or `SLOT@FILE` takes precedence for its slot.
    #[arg(long, value_name = "SLOT=FILE")]
    pub config: Vec<String>,
    /// One option of a slot's policy, for every policy set, e.g. `--set locality.widen_after_s=[300,1800]`
    /// or `--set fairness.lend=false` (repeatable; the value is TOML; it
    /// overrides the preset's and `--config`'s value of that key).
    #[arg(long = "set", value_name = "SLOT.KEY=VALUE")]
    pub set: Vec<String>,
    /// Policy sets to compare side by side on the same workload: presets,
    /// each optionally with slots replaced and configured, e.g.
    /// `philly,philly+retry=failure-aware,fifo` or
    /// `philly,philly+fairness=my.wasm@my.toml` (`SLOT@FILE` configures
    /// the preset's own policy: `philly+fairness@strict.toml`).
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<String>,
    /// Seed for the generator and the failure process.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Jobs to generate, or the first N jobs of `--trace` (by submit time;
    /// a `csv` or `rfold` file in submit order is read only as far as the
    /// window needs, so an error beyond it is not found).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Skip the trace's first N jobs (with `--jobs`, a window of the trace).
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    /// Multiply every submit time by this factor: below 1 compresses arrivals
    /// and raises the load (a what-if knob; 1 replays the trace as recorded).
    /// Default: 1 for `--trace`; for the built-in generator
    /// [`DEFAULT_GENERATED_TIME_SCALE`], the study's load.
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Run built-in policies natively instead of as Wasm modules.
    #[arg(long)]
    pub native: bool,
    /// Output directory for report.json and the SVG plots.
    #[arg(long, default_value = "replay-out")]
    pub out: PathBuf,
    /// VC quotas: `demand` (each VC's share of the trace's GPU-time times the
    /// cluster's GPUs), `demand:F` (the same shares of F times the cluster's
    /// GPUs, e.g. `demand:0.6`), `helios` (the Helios artifact's Philly VC
    /// sizes, `$GANGWAY_DATA/philly/helios_philly_vc.csv`: nodes of 8 GPUs;
    /// `helios:F` F times them), `none`, or a CSV file `vc,gpus` (or
    /// `vc,node num`, as Helios writes it). The run says which it used.
    #[arg(long, default_value = "demand")]
    pub quotas: String,
    /// Seconds between scheduling passes (0: a round at every event).
    #[arg(long, default_value_t = 10)]
    pub round_interval: u64,
    /// Mean time between failures of one server, in hours (off by default):
    /// a failed server is down for a while, and the jobs it held resume on
    /// other GPUs from their last checkpoint (`--checkpoint-s`).
    #[arg(long)]
    pub server_mtbf_hours: Option<f64>,
    /// Placement tie-break, overriding the preset's: `best-fit` keeps large
    /// holes free; `spread` puts work on the emptiest servers, as YARN-style
    /// schedulers like Philly's do.
    #[arg(long, value_parser = placement_parser())]
    pub placement: Option<PlacementStrategy>,
    /// Pending jobs per VC a round shows a fairness policy that declares its
    /// queue order (0: every pending job).
    #[arg(long, default_value_t = gangway_core::Scheduler::DEFAULT_VIEW_WINDOW)]
    pub view_window: usize,
    /// Seconds a preempted or migrated job loses restarting from its checkpoint.
    #[arg(long, default_value_t = 60)]
    pub restart_s: u64,
    /// How often a running job checkpoints, in seconds of its run: a server
    /// failure (`--server-mtbf-hours`) loses the run since the last one, and
    /// the job resumes after `--restart-s` (0: no checkpoints, it runs again
    /// from the start).
    #[arg(long, default_value_t = sim::DEFAULT_CHECKPOINT_S)]
    pub checkpoint_s: u64,
    /// An absolute bound on the fuel a Wasm module may use in one slot over
    /// the whole replay (instructions, roughly; 0: no bound), instead of
    /// the default budgets: everything the run spends on the module counts
    /// (its calls, the `init` of each fresh instance, the host's checks of
    /// its twins, the host's reading of its refusals and logs), and the
    /// load's warm-up is held to it too. By default a module may use 20
    /// times what the slot's built-in policies cost on the same views over
    /// its last 32 calls (2,000 times with `--large-policies`), each call
    /// charged at most a fortieth of the per-call fuel; 2x10^9 units and
    /// 250 ms over any 100 rounds (a hundred times that with
    /// `--large-policies`); and 10^12 units over the run. A module past any
    /// of them falls back to the slot's built-in policy for that call;
    /// three failures in a row, five in twenty calls, eight in 64, or a
    /// second spent in failed calls among its last 64 quarantine it, and
    /// the report says so: whatever a module does, a round is held up by
    /// at most about 250 ms per slot and a replay by about 2.5 ms per round
    /// per slot.
    #[arg(long)]
    pub policy_fuel: Option<u64>,
    /// Allow policy modules that carry an interpreter, such as a Python
    /// policy built with componentize-py (`python -m gangway.componentize`):
    /// up to 64 MiB and 128 core instances, compiled for up to 5 minutes
    /// (once; the module cache keeps it), instead of 4 MiB and 16; each
    /// call gets a hundred times the default fuel, and so do the work
    /// budget and the run's bound unless `--policy-fuel` is given.
    #[arg(long)]
    pub large_policies: bool,
    /// Skip the SVG plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Show more of the log on stderr: `-v` info, `-vv` debug (default:
    /// warnings, or `RUST_LOG`).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Also write one CSV per run with a line per job (`<run>-jobs.csv`).
    #[arg(long)]
    pub jobs_csv: bool,
    /// Print nothing on stdout (report.json and plots are still written).
    #[arg(short, long)]
    pub quiet: bool,
    /// Compare each run with observed targets and add the fit to
    /// report.json: `philly` (the study's figures, built in) or a targets
    /// file (TOML; see `replay calibrate --help`).
    #[arg(long, value_name = "philly|FILE")]
    pub fit: Option<String>,
    /// The arguments as given (after the program name), for report.json's
    /// `reproduce`; set by the binary and by `json::replay_json`.
    #[arg(skip)]
    pub argv: Vec<String>,
    /// Policies a host supplies beside the command line (e.g. written in
    /// Python), each replacing its slot in every policy set.
    #[arg(skip)]
    pub policy_overrides: Vec<PolicyOverride>,
    /// Model features to switch off (comma-separated; all are on by
    /// default): `heartbeat-placement`, `server-ladder`, `locality-cost`,
    /// `status-runtimes`, `retry-gap`, `warm-start`, `varied-deadlines`.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub without: Vec<Feature>,
}

/// A policy a host supplies for one slot of every policy set (a policy
/// object of the host's language), replacing the slot's policy after the
/// set is built.
#[derive(Clone)]
pub struct PolicyOverride {
    /// The slot.
    pub slot: gangway_core::Slot,
    /// The name reports give it (`python:SmallestFirst`).
    pub name: String,
    /// Puts the policy into a set.
    pub apply: std::sync::Arc<
        dyn Fn(gangway_core::policy::PolicySet) -> gangway_core::policy::PolicySet + Send + Sync,
    >,
}

impl std::fmt::Debug for PolicyOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyOverride")
            .field("slot", &self.slot)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The Philly model's features (`docs/philly-model.md`); each is on unless
/// named in `--without`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Feature {
    /// Presets that place as YARN does (`placement = "heartbeat"`) use
    /// `spread` instead.
    HeartbeatPlacement,
    /// The `delay` locality policy bounds servers only at its first step
    /// (`server_factors = [1, 0]`) instead of x1, x2, x4.
    ServerLadder,
    /// Attempts run at recorded speed however many servers they span.
    LocalityCost,
    /// The generator draws the same run time for every final status.
    StatusRuntimes,
    /// The `fixed` retry policy re-queues at once (unless its configuration
    /// sets `after_s`) instead of after [`RETRY_GAP_S`].
    RetryGap,
    /// A `--skip` window, or a generated workload, starts on an empty cluster.
    WarmStart,
    /// The `delay` locality policy relaxes every job after the same waits
    /// (`deadline_spread = 0`) instead of after waits drawn per job.
    VariedDeadlines,
}

/// The policy sets the command line asks for, in order.
pub fn choices(cli: &Cli) -> Result<Vec<PolicyChoice>, PolicyResolveError> {
    let specs: Vec<String> = if cli.compare.is_empty() {
        vec![cli.policies.clone().unwrap_or_else(|| "philly".into())]
    } else {
        cli.compare.clone()
    };
    let mut configs: Vec<(gangway_core::Slot, Vec<u8>)> = Vec::new();
    for c in &cli.config {
        let (slot, file) = c.split_once('=').ok_or_else(|| {
            PolicyResolveError::Choice(format!("--config {c:?}: expected SLOT=FILE"))
        })?;
        let slot = policies::slot_named(slot, &format!("--config {c}"))?;
        let bytes = std::fs::read(file)
            .map_err(|e| PolicyResolveError::Choice(format!("{file}: cannot read: {e}")))?;
        configs.push((slot, bytes));
    }
    let mut out = Vec::new();
    for spec in specs {
        let mut choice = policies::parse_choice(&spec)?;
        for (slot, p) in cli.slots.chosen() {
            choice.slots.insert(
                slot,
                SlotChoice {
                    policy: p.to_string(),
                    config: Vec::new(),
                },
            );
            choice.name = format!("{}+{slot}={p}", choice.name);
        }
        for (slot, bytes) in &configs {
            if configured_in(&spec, *slot) {
                // The entry's own `SLOT...@FILE` is more specific.
                continue;
            }
            let mut s = choice.slot(*slot);
            s.config = bytes.clone();
            choice.slots.insert(*slot, s);
        }
        for arg in &cli.set {
            let (slot, key, value) =
                parse_set(arg).map_err(|e| PolicyResolveError::Choice(e.to_string()))?;
            set_option(&mut choice, slot, &key, value)
                .map_err(|e| PolicyResolveError::Choice(e.to_string()))?;
        }
        out.push(choice);
    }
    Ok(out)
}

/// Whether the `--compare` or `--policies` entry `spec` gives `slot` a
/// configuration file of its own (`+slot=policy@file` or `+slot@file`).
fn configured_in(spec: &str, slot: gangway_core::Slot) -> bool {
    spec.split('+').skip(1).any(|part| {
        part.split_once('@')
            .is_some_and(|(head, _)| head.split('=').next() == Some(slot.as_str()))
    })
}

/// `--placement`: the names of [`PlacementStrategy::NAMES`] (listed in
/// `--help`), each to its strategy (a heartbeat order is seeded by `--seed`
/// later).
fn placement_parser() -> impl clap::builder::TypedValueParser<Value = PlacementStrategy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(PlacementStrategy::NAMES).try_map(|name: String| {
        PlacementStrategy::from_name(&name).ok_or_else(|| format!("unknown placement {name:?}"))
    })
}

/// Seconds a `fixed` retry waits in the Philly model (feature `retry-gap`):
/// the median gap between attempts, inside their 180-195 s mode (PHILLY.md
/// §2.2).
pub const RETRY_GAP_S: i64 = 186;

/// Applies the model features not named in `without` to one policy choice
/// and seeds its heartbeat order.
pub fn apply_features(
    choice: &mut PolicyChoice,
    without: &[Feature],
    seed: u64,
) -> Result<(), ReplayError> {
    use gangway_core::{PlacementStrategy, Slot};
    if let PlacementStrategy::Heartbeat { .. } = choice.placement {
        choice.placement = if without.contains(&Feature::HeartbeatPlacement) {
            PlacementStrategy::Spread
        } else {
            PlacementStrategy::Heartbeat { seed }
        };
    }
    let gap_set = String::from_utf8_lossy(&choice.slot(Slot::Retry).config).contains("after_s");
    let mut set = |slot: Slot, policy: &str, key: &str, value: toml::Value| {
        if choice.slot(slot).policy != policy {
            return Ok(());
        }
        set_option(choice, slot, key, value)
    };
    if without.contains(&Feature::VariedDeadlines) {
        set(
            Slot::Locality,
            "delay",
            "deadline_spread",
            toml::Value::Float(0.0),
        )?;
    }
    if without.contains(&Feature::ServerLadder) {
        let factors = toml::Value::Array(vec![toml::Value::Integer(1), toml::Value::Integer(0)]);
        set(Slot::Locality, "delay", "server_factors", factors)?;
    }
    // Philly re-queued a failed attempt after a gap: the gaps between
    // attempts have their mode at 180-195 s and median 186 s (PHILLY.md
    // §2.2). A `fixed` retry policy whose configuration sets no `after_s`
    // waits that long in the model.
    if !without.contains(&Feature::RetryGap) && !gap_set {
        set(
            Slot::Retry,
            "fixed",
            "after_s",
            toml::Value::Integer(RETRY_GAP_S),
        )?;
    }
    Ok(())
}

/// Sets option `key` of `slot`'s policy in `choice` to `value`, keeping
/// the rest of its configuration.
pub fn set_option(
    choice: &mut PolicyChoice,
    slot: gangway_core::Slot,
    key: &str,
    value: toml::Value,
) -> Result<(), ReplayError> {
    let mut s = choice.slot(slot);
    let text = String::from_utf8(s.config.clone())
        .map_err(|_| ReplayError::Usage(format!("{slot} config is not UTF-8")))?;
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| ReplayError::Usage(format!("{slot} config: {e}")))?;
    table.insert(key.to_string(), value);
    s.config = toml::to_string(&table)
        .map_err(|e| ReplayError::Usage(format!("{slot} config: {e}")))?
        .into_bytes();
    choice.slots.insert(slot, s);
    Ok(())
}

/// One `--set SLOT.KEY=VALUE`: the slot, the key and the TOML value.
///
/// ```
/// use gangway_replay::cli::parse_set;
/// let (slot, key, value) = parse_set("locality.widen_after_s=[300, 1800]").unwrap();
/// assert_eq!((slot.as_str(), key.as_str()), ("locality", "widen_after_s"));
/// assert_eq!(value, toml::Value::Array(vec![300.into(), 1800.into()]));
/// assert!(parse_set("locality.widen_after_s").is_err());
/// assert!(parse_set("nowhere.x=1").is_err());
/// ```
pub fn parse_set(arg: &str) -> Result<(gangway_core::Slot, String, toml::Value), ReplayError> {
    let usage = |why: &str| ReplayError::Usage(format!("--set {arg:?}: {why}"));
    let (path, value) = arg
        .split_once('=')
        .ok_or_else(|| usage("expected SLOT.KEY=VALUE"))?;
    let (slot, key) = path
        .trim()
        .split_once('.')
        .ok_or_else(|| usage("expected SLOT.KEY=VALUE"))?;
    let slot = policies::slot_named(slot, &format!("--set {arg}"))?;
    if key.is_empty() {
        return Err(usage("the key is empty"));
    }
    let table: toml::Table = toml::from_str(&format!("v = {}", value.trim()))
        .map_err(|e| usage(&format!("the value is not TOML: {}", e.message())))?;
    let value = table
        .get("v")
        .cloned()
        .ok_or_else(|| usage("the value is missing"))?;
    Ok((slot, key.to_string(), value))
}

/// Anything that stops a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Bad trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Bad topology.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// Bad policy choice or module.
    #[error(transparent)]
    Policy(#[from] PolicyResolveError),
    /// One policy set of several (`--compare`) cannot be built.
    #[error("policy set {set:?}: {source}{hint}")]
    PolicySet {
        /// The set's name as given.
        set: String,
        /// Why.
        source: PolicyResolveError,
        /// What to do about it, if there is a likely remedy ("" if not).
        hint: &'static str,
    },
    /// The replay failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A plot failed.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// A bad targets file (`--fit`, `replay calibrate --targets`).
    #[error(transparent)]
    Targets(#[from] crate::calibrate::targets::TargetsError),
    /// A bad argument.
    #[error("{0}")]
    Usage(String),
    /// Output could not be written.
    #[error("{file}: cannot write: {source}")]
    Write {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Prints `line` unless `--quiet`.
fn say(cli: &Cli, line: &str) {
    if !cli.quiet {
        println!("{line}");
    }
}
