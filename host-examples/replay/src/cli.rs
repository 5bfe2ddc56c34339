//! The `replay` command line: argument parsing, input loading, runs, outputs.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use gangway_core::wasm::LoadLimits;
use gangway_core::{PlacementStrategy, RackGrouping, Topology, TopologyError};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cluster_shape::ClusterShape;
use crate::plots::{self, PlotError};
use crate::report::{self, Policies, Report, TopologyInfo, Workload};
use crate::sim::{self, SimConfig, SimError};
use crate::trace::{self, Format, Trace, TraceError};
use crate::workload;
use gangway_catalog::resolve::{self as policies, PolicyResolveError};
use gangway_catalog::slot_flags::{PolicyOrModule, SlotFlags};
use gangway_catalog::{PolicyChoice, SlotChoice};

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
    /// A Philly machine list (CSV); without it the built-in Philly machine mix.
    #[arg(long, conflicts_with = "topology")]
    pub machines: Option<PathBuf>,
    /// A uniform cluster: `SERVERSxGPUS` (one rack, e.g. `311x8`) or
    /// `RACKSxSERVERSxGPUS` (e.g. `4x8x8`).
    #[arg(long, conflicts_with_all = ["machines", "topology"])]
    pub cluster: Option<ClusterShape>,
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
    /// GPUs, e.g. `demand:0.6`), `none`, or a CSV file `vc,gpus`.
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
    /// The fuel a Wasm module may use in one slot over the whole replay
    /// (instructions, roughly; 0: no bound). A module past it falls back to
    /// the slot's built-in policy and is quarantined, and the report says
    /// so: a policy slow within each call's budget cannot make a replay
    /// take hours. The default is about a minute of guest CPU; the built-in
    /// policies use at most a twentieth of it.
    #[arg(long, default_value_t = policies::Loader::DEFAULT_FUEL_PER_BACKEND)]
    pub policy_fuel: u64,
    /// Allow policy modules that carry an interpreter, such as a Python
    /// policy built with componentize-py (`python -m gangway.componentize`):
    /// up to 64 MiB and 128 core instances, compiled for up to 5 minutes
    /// (once; the module cache keeps it), instead of 4 MiB and 16; each
    /// call gets a hundred times the default fuel, and so does the run
    /// unless `--policy-fuel` is given.
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

/// The topology the command line asks for, where it came from, and (for
/// `--machines`) how its machines were grouped into racks.
fn topology(cli: &Cli) -> Result<(Topology, String, Option<String>), ReplayError> {
    if let Some(path) = &cli.topology {
        return Ok((Topology::from_file(path)?, path.display().to_string(), None));
    }
    if let Some(shape) = &cli.cluster {
        return Ok((shape.topology()?, format!("--cluster {shape}"), None));
    }
    if let Some(path) = &cli.machines {
        let grouping = RackGrouping::named(&cli.rack_grouping, cli.rack_size).ok_or_else(|| {
            ReplayError::Usage(format!(
                "--rack-grouping {:?}: expected one of {:?}",
                cli.rack_grouping,
                RackGrouping::NAMES
            ))
        })?;
        return Ok((
            Topology::from_machine_list(path, grouping)?,
            path.display().to_string(),
            Some(grouping.to_string()),
        ));
    }
    Ok((
        workload::philly_topology()?,
        "built-in Philly machine mix (revised list: 264x8 + 271x4 + 1x3 + 3x2 GPUs)".into(),
        Some(RackGrouping::default().to_string()),
    ))
}

/// Racks of a topology: domains one level below the cluster.
fn racks_of(topo: &Topology) -> usize {
    topo.domains_at(gangway_core::Level(1)).len()
}

/// The topology in one line: `552 servers in 21 racks, 3205 GPUs
/// (same-sku, 32 per rack)`, the grouping only where machines were grouped.
fn shape_line(topo: &Topology, grouping: Option<&str>) -> String {
    let plural = |n: usize, one: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    let mut line = format!(
        "{} in {}, {} GPUs",
        plural(topo.servers().len(), "server"),
        plural(racks_of(topo), "rack"),
        topo.total_gpus()
    );
    if let Some(g) = grouping {
        line.push_str(&format!(" ({g})"));
    }
    line
}

/// The end of the `workload:` line: warm jobs left out as beyond the
/// cluster's GPUs ([`Trace::limit_warm`]) and the time scale, where they
/// apply.
fn push_left_out_and_scale(source: &mut String, over: usize, time_scale: f64) {
    if over > 0 {
        source.push_str(&format!(
            ", {over} more left out as beyond the cluster's GPUs"
        ));
    }
    if time_scale != 1.0 {
        source.push_str(&format!(", time scale {time_scale}"));
    }
}

fn workload_of(cli: &Cli, cluster_gpus: u32) -> Result<(Trace, String), ReplayError> {
    match &cli.trace {
        Some(path) => {
            // A window needs only its jobs and those before it (the warm
            // start's): readers of files in submit order stop there.
            let needed = cli.jobs.map(|jobs| cli.skip.saturating_add(jobs));
            let mut t = trace::load_first(path, cli.format, needed)?;
            let labels = match &cli.vcs {
                Some(file) => {
                    if cli.format != Format::Rfold {
                        return Err(ReplayError::Usage(
                            "--vcs labels an RFold trace (--format rfold)".into(),
                        ));
                    }
                    Some((file, trace::label_vcs(&mut t, file)?))
                }
                None => None,
            };
            let warm = !cli.without.contains(&Feature::WarmStart);
            t.window_warm(cli.skip, cli.jobs.unwrap_or(usize::MAX), warm);
            let over = t.limit_warm(cluster_gpus);
            let time_scale = cli.time_scale.unwrap_or(1.0);
            t.scale_time(time_scale);
            let mut source = format!("{} ({})", path.display(), cli.format);
            if let Some((file, n)) = labels {
                source.push_str(&format!(
                    ", VCs from {}: {} jobs matched, {} with a VC drawn from the per-VC mix",
                    file.display(),
                    n.matched,
                    n.fallback
                ));
            }
            if cli.skip > 0 || cli.jobs.is_some() {
                let own = t.jobs.len() - t.warm;
                source.push_str(&format!(", jobs {}..{}", cli.skip, cli.skip + own));
                if t.warm > 0 {
                    source.push_str(&format!(
                        ", warm start: {} earlier jobs still running at the window's start",
                        t.warm
                    ));
                }
            }
            push_left_out_and_scale(&mut source, over, time_scale);
            Ok((t, source))
        }
        None => {
            let n = cli.jobs.unwrap_or(DEFAULT_GENERATED_JOBS);
            let status_runtimes = !cli.without.contains(&Feature::StatusRuntimes);
            // Started warm: a lead-in of `WARM_LEAD_DAYS` days is generated
            // first, and what still runs of it at the start is loaded.
            let warm = !cli.without.contains(&Feature::WarmStart);
            let lead = if warm {
                (workload::JOBS_PER_DAY * WARM_LEAD_DAYS) as usize
            } else {
                0
            };
            let mut t = workload::generate_with(n + lead, cli.seed, status_runtimes);
            t.window_warm(lead, n, warm);
            let over = t.limit_warm(cluster_gpus);
            let time_scale = cli.time_scale.unwrap_or(DEFAULT_GENERATED_TIME_SCALE);
            t.scale_time(time_scale);
            let mut source = format!(
                "built-in Philly-calibrated generator, {n} jobs, seed {}",
                cli.seed
            );
            if t.warm > 0 {
                source.push_str(&format!(
                    ", started warm: {} jobs of a {WARM_LEAD_DAYS}-day lead-in still running",
                    t.warm
                ));
            }
            push_left_out_and_scale(&mut source, over, time_scale);
            if cli.time_scale.is_none() {
                source.push_str(" (the study's load; `--time-scale 1` for the public trace's)");
            }
            Ok((t, source))
        }
    }
}

/// Jobs the built-in generator makes when `--jobs` is not given: about 7
/// days of the public trace's arrivals (4.7 days at
/// [`DEFAULT_GENERATED_TIME_SCALE`]), so the default run, contended as it
/// is, stays under 10 s on a 2-core machine with Wasm policies (`docs/performance.md`).
pub const DEFAULT_GENERATED_JOBS: usize = 12_000;

/// The time scale of a generated workload when `--time-scale` is not given:
/// arrivals 1/0.65 = 1.54x as dense as the public trace's. The public trace
/// is a sanitized subset that loads Philly's 3,205 GPUs to about 44 %
/// (PHILLY.md section 6b) and the generator's rate (to about 74 %), while
/// the study's cluster ran 1,500-2,150 GPUs with up to 1,000 more pending
/// (PHILLY.md section 4): at 0.65 the GPUs are about 90 % allocated, both
/// kinds of queueing delay occur, quotas bind and waits reach hours.
pub const DEFAULT_GENERATED_TIME_SCALE: f64 = 0.65;

/// Days of generated lead-in whose still-running jobs a generated workload
/// starts with (feature `warm-start`), so the cluster is not empty at first.
pub const WARM_LEAD_DAYS: f64 = 10.0;

/// Quotas per VC name.
pub fn quotas(
    spec: &str,
    trace: &Trace,
    cluster_gpus: u32,
) -> Result<BTreeMap<String, u32>, ReplayError> {
    match spec {
        "none" => Ok(BTreeMap::new()),
        "demand" => Ok(demand_quotas(trace, cluster_gpus)),
        s if s.starts_with("demand:") => {
            let f: f64 = s["demand:".len()..]
                .parse()
                .ok()
                .filter(|f: &f64| *f > 0.0 && f.is_finite())
                .ok_or_else(|| {
                    ReplayError::Usage(format!("--quotas {s}: expected demand:F, F > 0"))
                })?;
            let gpus = (f64::from(cluster_gpus) * f).round() as u32;
            Ok(demand_quotas(trace, gpus.max(1))
                .into_iter()
                .map(|(vc, q)| (vc, q.min(cluster_gpus)))
                .collect())
        }
        file => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| ReplayError::Usage(format!("{file}: cannot read quotas: {e}")))?;
            let mut out = BTreeMap::new();
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') || (i == 0 && line.starts_with("vc")) {
                    continue;
                }
                let (vc, gpus) = line.split_once(',').ok_or_else(|| {
                    ReplayError::Usage(format!("{file}:{}: expected `vc,gpus`", i + 1))
                })?;
                let gpus: u32 = gpus.trim().parse().map_err(|_| {
                    ReplayError::Usage(format!("{file}:{}: {gpus:?} is not a GPU count", i + 1))
                })?;
                out.insert(vc.trim().to_string(), gpus);
            }
            Ok(out)
        }
    }
}

/// Each VC's share of the trace's GPU-time demand times the cluster's GPUs
/// (the quotas add up to the cluster), and at least the VC's largest job so
/// every job fits its quota.
pub fn demand_quotas(trace: &Trace, cluster_gpus: u32) -> BTreeMap<String, u32> {
    let mut demand: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for j in &trace.jobs {
        let run = j.run_s();
        let e = demand.entry(j.vc.as_str()).or_default();
        e.0 += f64::from(j.gpus) * run as f64;
        e.1 = e.1.max(j.gpus);
    }
    let total: f64 = demand.values().map(|d| d.0).sum::<f64>().max(1.0);
    demand
        .into_iter()
        .map(|(vc, (gpu_s, largest))| {
            let share = (gpu_s / total * f64::from(cluster_gpus)).round() as u32;
            (vc.to_string(), share.max(largest).min(cluster_gpus))
        })
        .collect()
}

/// A run's name as a file name (`+`, `=` and `/` become `_`).
fn file_name(run: &str) -> String {
    run.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One line per job of a run: `id,vc,gpus,submit_s,first_start_s,end_s,
/// status,attempts,servers,wait_<reason>_s...` (empty cells for what did not
/// happen). Jobs carried into a window warm are left out, as in the report.
///
/// ```
/// use gangway_replay::{cli as replay_cli, sim, workload};
/// let trace = workload::generate(50, 1);
/// let topo = gangway_core::Topology::uniform(1, 4, 8).unwrap();
/// let set = gangway_catalog::preset("fifo").unwrap().build_native().unwrap();
/// let r = sim::run(topo, &trace, set, &sim::SimConfig::default(), |_| {}).unwrap();
/// let csv = replay_cli::jobs_csv(&trace, &r);
/// assert_eq!(csv.lines().count(), 51);
/// assert!(csv.starts_with("id,vc,gpus,submit_s,first_start_s,end_s,status,attempts,servers,wait_fair-share_s"));
/// ```
pub fn jobs_csv(trace: &Trace, result: &sim::RunResult) -> String {
    use gangway_core::WaitReason;
    let mut out = String::from("id,vc,gpus,submit_s,first_start_s,end_s,status,attempts,servers");
    for r in WaitReason::ALL {
        out.push_str(&format!(",wait_{}_s", r.as_str()));
    }
    out.push('\n');
    let opt = |x: Option<u64>| x.map_or(String::new(), |v| v.to_string());
    for (j, tj) in result.jobs.iter().zip(&trace.jobs).skip(result.warm) {
        let status = j.status.map_or("", trace::Outcome::as_str);
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}",
            csv_cell(&tj.name),
            csv_cell(result.vcs.get(j.vc).map_or("", String::as_str)),
            j.gpus,
            j.submit_s,
            opt(j.first_start_s),
            opt(j.finish_s),
            status,
            j.attempts,
            j.first_servers.map_or(String::new(), |s| s.to_string()),
        ));
        for r in WaitReason::ALL {
            out.push_str(&format!(",{}", j.waited(r)));
        }
        out.push('\n');
    }
    out
}

/// A CSV cell: quoted when it holds a comma, quote or line break.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), ReplayError> {
    std::fs::write(path, bytes).map_err(|source| ReplayError::Write {
        file: path.display().to_string(),
        source,
    })
}

/// The `reproduce` record of `cli`: its arguments, seed, time scale and
/// the input files it names.
fn reproduce_of(cli: &Cli) -> Result<crate::reproduce::Reproduce, ReplayError> {
    let time_scale = cli.time_scale.unwrap_or(if cli.trace.is_some() {
        1.0
    } else {
        DEFAULT_GENERATED_TIME_SCALE
    });
    let mut r = crate::reproduce::Reproduce::new(
        crate::reproduce::result_args(
            <Cli as clap::CommandFactory>::command(),
            cli.argv.iter().cloned(),
        ),
        cli.seed,
        time_scale,
    );
    let quota_file = (!matches!(cli.quotas.as_str(), "none" | "demand")
        && !cli.quotas.starts_with("demand:"))
    .then(|| PathBuf::from(&cli.quotas));
    let fit_file = cli
        .fit
        .as_ref()
        .filter(|f| crate::calibrate::targets::Targets::builtin(f).is_none())
        .map(PathBuf::from);
    for (role, path) in [
        ("trace", &cli.trace),
        ("vcs", &cli.vcs),
        ("machines", &cli.machines),
        ("topology", &cli.topology),
        ("quotas", &quota_file),
        ("fit targets", &fit_file),
    ] {
        if let Some(p) = path {
            r.add_file(role, p)
                .map_err(|e| ReplayError::Usage(format!("{}: cannot read: {e}", p.display())))?;
        }
    }
    Ok(r)
}

/// Runs the replay the command line asks for.
pub fn run(cli: &Cli) -> Result<(), ReplayError> {
    run_observed(cli, &mut |_, _| std::ops::ControlFlow::Continue(()))
}

/// How far one policy set's replay has got, for a host watching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watched<'a> {
    /// The policy set (its name as reported).
    pub set: &'a str,
    /// Jobs in the workload.
    pub jobs: usize,
    /// How far it has got.
    pub progress: sim::Progress,
}

/// [`run`], telling `observer` how far each policy set's replay has got
/// whenever a job arrives or ends, together with the set's index among
/// those compared; a [`std::ops::ControlFlow::Break`] stops the replay with
/// [`sim::SimError::Interrupted`] (a host's Ctrl-C or cancel button).
pub fn run_observed(
    cli: &Cli,
    observer: &mut dyn FnMut(usize, Watched<'_>) -> std::ops::ControlFlow<()>,
) -> Result<(), ReplayError> {
    let load_clock = Instant::now();
    let (topo, topo_source, grouping) = topology(cli)?;
    if let Some(scale) = cli.time_scale
        && !(scale > 0.0 && scale.is_finite())
    {
        return Err(ReplayError::Usage(format!(
            "--time-scale {scale} must be a positive number"
        )));
    }
    let (trace, source) = workload_of(cli, topo.total_gpus())?;
    if trace.jobs.is_empty() {
        return Err(ReplayError::Usage("the workload has no jobs".into()));
    }
    let say = |line: &str| {
        if !cli.quiet {
            println!("{line}");
        }
    };
    say(&format!("workload: {source}"));
    say(&format!(
        "topology: {topo_source}: {}",
        shape_line(&topo, grouping.as_deref())
    ));
    for s in &trace.skipped {
        eprintln!("replay: not replayable: {}: {}", s.at, s.reason);
    }
    let (unknown, on_unknown) = trace.unknown_machines(|m| topo.server_by_name(m).is_some());
    if let Some(first) = unknown.first() {
        tracing::warn!(
            "the trace ran {on_unknown} jobs on {} machines that {topo_source} lacks (first: {first}); \
             replay places every job itself, so this only says the trace and the cluster differ",
            unknown.len()
        );
    }
    let quotas = quotas(&cli.quotas, &trace, topo.total_gpus())?;
    let choices: Vec<PolicyChoice> = choices(cli)?;
    let targets = match &cli.fit {
        Some(spec) => Some(crate::calibrate::targets::Targets::named_or_file(spec)?),
        None => None,
    };
    let mut reproduce = reproduce_of(cli)?;
    let load_time = load_clock.elapsed();
    let cfg = SimConfig {
        round_interval_s: cli.round_interval,
        server_mtbf_s: cli.server_mtbf_hours.map(|h| (h * 3600.0).max(1.0) as u64),
        seed: cli.seed,
        quotas,
        restart_s: cli.restart_s,
        checkpoint_s: cli.checkpoint_s,
        view_window: cli.view_window,
        locality_cost: !cli.without.contains(&Feature::LocalityCost),
        ..SimConfig::default()
    };
    if let (Some(mtbf), 0) = (cfg.server_mtbf_s, cfg.checkpoint_s) {
        tracing::warn!(
            "--checkpoint-s 0 with --server-mtbf-hours: an interrupted job runs again from \
             the start, so a gang longer than its servers' time between failures ({} h per \
             server) may never finish; the progress bar shows whether jobs still end",
            mtbf / 3600
        );
    }
    std::fs::create_dir_all(&cli.out).map_err(|source| ReplayError::Write {
        file: cli.out.display().to_string(),
        source,
    })?;
    let mut runs = Vec::new();
    let mut written = Vec::new();
    let limits = if cli.large_policies {
        LoadLimits::for_interpreters()
    } else {
        LoadLimits::default()
    };
    // Modules that carry an interpreter get a hundred times the default
    // fuel, per call and per run, unless the run's bound was given.
    let fuel =
        if cli.large_policies && cli.policy_fuel == policies::Loader::DEFAULT_FUEL_PER_BACKEND {
            policies::Loader::INTERPRETER_FUEL_PER_BACKEND
        } else {
            cli.policy_fuel
        };
    let mut loader = policies::Loader::with_limits((fuel > 0).then_some(fuel), limits)?;
    for choice in &choices {
        let mut choice = choice.clone();
        if let Some(p) = cli.placement {
            // A heartbeat order gets its seed from `apply_features`.
            choice.placement = p;
        }
        apply_features(&mut choice, &cli.without, cli.seed)?;
        for slot in gangway_core::Slot::ALL {
            let s = choice.slot(slot);
            if s.policy.ends_with(".wasm") {
                let role = format!("module of {slot} in {}", choice.name);
                reproduce
                    .add_file(&role, Path::new(&s.policy))
                    .map_err(|e| ReplayError::Usage(format!("{}: cannot read: {e}", s.policy)))?;
            }
            if !s.config.is_empty() {
                let role = format!("configuration of {slot} in {}", choice.name);
                reproduce.add_bytes(&role, "(as applied)", &s.config);
            }
        }
        let choice = &choice;
        let policy_clock = Instant::now();
        let set = loader.build(choice, cli.native).map_err(|source| {
            if choices.len() == 1 {
                return ReplayError::Policy(source);
            }
            let hint = if cli.config.is_empty() {
                ""
            } else {
                " (--config applies to every set; give one set its own configuration with \
                 SLOT=POLICY@FILE or SLOT@FILE)"
            };
            ReplayError::PolicySet {
                set: choice.name.clone(),
                source,
                hint,
            }
        })?;
        let mut set = set;
        let mut shown = choice.clone();
        for o in &cli.policy_overrides {
            set = (o.apply)(set);
            shown.slots.insert(
                o.slot,
                SlotChoice {
                    policy: o.name.clone(),
                    config: Vec::new(),
                },
            );
            shown.name = format!("{}+{}={}", shown.name, o.slot, o.name);
        }
        let choice = &shown;
        let names = Policies::of(choice);
        let policy_time = policy_clock.elapsed();
        let cfg = SimConfig {
            placement: choice.placement,
            ..cfg.clone()
        };
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(
                Some(trace.jobs.len() as u64),
                ProgressDrawTarget::stderr(),
            )
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:40}] {pos}/{len} jobs done, {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(choice.name.clone());
        let cpu_start = crate::cpu_time::process_cpu();
        let mut day = u64::MAX;
        let jobs = trace.jobs.len();
        let index = runs.len();
        let progress = |p: sim::Progress| {
            bar.set_position(p.finished as u64);
            if p.now_s / 86_400 != day {
                day = p.now_s / 86_400;
                bar.set_message(format!("{} arrived, simulated day {day}", p.arrived));
            }
            observer(
                index,
                Watched {
                    set: &choice.name,
                    jobs,
                    progress: p,
                },
            )
        };
        let result = sim::run_until(topo.clone(), &trace, set, &cfg, progress)?;
        let cpu = crate::cpu_time::since(cpu_start);
        bar.finish_and_clear();
        say(&format!(
            "{}: replayed {} jobs in {:.2} s{} ({} rounds, {} skipped as no gang could fit, {:.2} s in rounds; inputs loaded in {:.2} s; {} ready in {:.2} s)",
            choice.name,
            trace.jobs.len(),
            result.elapsed.as_secs_f64(),
            crate::cpu_time::describe(cpu),
            result.rounds,
            result.skipped_rounds,
            result.in_rounds.as_secs_f64(),
            load_time.as_secs_f64(),
            if cli.native {
                "native policies"
            } else {
                "policies as Wasm modules"
            },
            policy_time.as_secs_f64(),
        ));
        let mut run = report::summarize(&choice.name, names, &result);
        if let Some(targets) = &targets {
            run.fit = Some(crate::calibrate::fit::fit(
                targets,
                &trace,
                &result,
                &run,
                cfg.round_interval_s,
            ));
        }
        if cli.jobs_csv {
            let path = cli
                .out
                .join(format!("{}-jobs.csv", file_name(&choice.name)));
            write(&path, jobs_csv(&trace, &result).as_bytes())?;
            written.push(path);
        }
        if !cli.no_plots {
            written.extend(plots::write_all(&cli.out, &run, &result)?);
        }
        runs.push(run);
    }
    let report = Report {
        reproduce,
        workload: Workload {
            source,
            jobs: trace.jobs.len(),
            warm: trace.warm,
            skipped: trace.skipped.clone(),
        },
        topology: TopologyInfo {
            source: topo_source,
            servers: topo.servers().len(),
            gpus: topo.total_gpus(),
            racks: racks_of(&topo),
            shape: shape_line(&topo, grouping.as_deref()),
            grouping,
        },
        runs,
    };
    say("");
    say(report::table(&report.runs).trim_end());
    if targets.is_some() {
        say("");
        say(crate::calibrate::fit::table(&report.runs).trim_end());
    }
    let json = serde_json::to_vec_pretty(&report)
        .map_err(|e| ReplayError::Usage(format!("cannot encode the report: {e}")))?;
    let path = cli.out.join("report.json");
    write(&path, &json)?;
    say("");
    say(&format!("wrote {}", path.display()));
    for f in written {
        say(&format!("wrote {}", f.display()));
    }
    Ok(())
}
