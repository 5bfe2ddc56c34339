//! The `replay calibrate` command line.

use std::path::PathBuf;

use clap::Parser;

use super::search::{self, Calibration, Evaluate, Plan, Spec};
use super::sensitivity_plot;
use crate::cli::ReplayError;

/// Fits the model's knobs (arrival scale, quotas, lending, the delay
/// ladder, per-job relaxation deadlines, round interval...) to observed
/// targets: a seeded Latin-hypercube search of candidate settings, each
/// replayed on several parts of the trace window (each on its own, as a
/// user runs it) at its load and a few percent either side, minimising a
/// high quantile of those scores (by default the worst); then the start
/// and the best replayed on held-out windows, and the best with its time
/// scale and quota factor moved (the sensitivity report). Prints the
/// tables and writes `calibrate.json` and `sensitivity.svg`.
///
/// The replay's own arguments (trace, topology, policies, window) follow
/// `--`; with `--trace`, `--jobs N` (and `--skip A`) give the window whose
/// parts the specification's `[windows]` name. Targets: `philly` (the
/// study's figures; see `host-examples/replay/src/calibrate/philly-targets.toml`
/// for the file format) or a file of yours. Knobs, ranges and windows: the
/// built-in specification
/// (`host-examples/replay/src/calibrate/philly-calibration.toml`) or
/// `--spec FILE`. Knobs: time_scale, quota_factor, quota_model, lend,
/// first_widen_s, second_widen_ratio, deadline_spread,
/// gang_deadline_factor, placement, round_interval_s, view_window.
#[derive(Debug, Parser)]
#[command(name = "replay calibrate", version)]
pub struct CalibrateCli {
    /// The search: knobs with ranges, start, candidates (TOML).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// What to match: `philly` or a targets file (TOML).
    #[arg(long, default_value = "philly")]
    pub targets: String,
    /// Candidate settings (overrides the spec's).
    #[arg(long)]
    pub candidates: Option<usize>,
    /// Seeds the search (overrides the spec's).
    #[arg(long)]
    pub search_seed: Option<u64>,
    /// Replays run at once (default: the machine's CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// No held-out windows.
    #[arg(long)]
    pub no_holdout: bool,
    /// Output directory for calibrate.json and sensitivity.svg.
    #[arg(long, default_value = "calibrate-out")]
    pub out: PathBuf,
    /// Print nothing on stdout.
    #[arg(short, long)]
    pub quiet: bool,
    /// The replay's arguments (after `--`).
    #[arg(last = true)]
    pub replay_args: Vec<String>,
}

impl CalibrateCli {
    /// Parses the arguments after `calibrate`; the error is clap's message.
    ///
    /// ```
    /// use gangway_replay::calibrate::command::CalibrateCli;
    /// let cli = CalibrateCli::from_args(["--candidates", "5", "--", "--jobs", "300"]).unwrap();
    /// assert_eq!((cli.candidates, cli.replay_args.len()), (Some(5), 2));
    /// assert!(CalibrateCli::from_args(["--candidate", "5"]).is_err());
    /// ```
    pub fn from_args<I, T>(args: I) -> Result<CalibrateCli, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let argv = std::iter::once(std::ffi::OsString::from("calibrate"))
            .chain(args.into_iter().map(Into::into));
        CalibrateCli::try_parse_from(argv).map_err(|e| e.to_string())
    }
}

/// Runs `replay calibrate` with `evaluate` running each batch of replays,
/// writes `calibrate.json` to `--out` and returns its text.
pub fn run(cli: &CalibrateCli, evaluate: &mut Evaluate<'_>) -> Result<String, ReplayError> {
    let mut spec = Spec::load(cli.spec.as_deref())?;
    if let Some(n) = cli.candidates {
        spec.candidates = n.max(1);
    }
    if let Some(s) = cli.search_seed {
        spec.seed = s;
    }
    search::check_targets(&cli.targets)?;
    let plan = Plan::new(
        cli.replay_args.clone(),
        &cli.targets,
        &spec,
        !cli.no_holdout,
    )?;
    let say = |line: &str| {
        if !cli.quiet {
            println!("{line}");
        }
    };
    say_plan(&spec, &plan, &say);
    let clock = std::time::Instant::now();
    let cpu = crate::cpu_time::process_cpu();
    let cal: Calibration = search::calibrate(&spec, &plan, evaluate, &mut |l| say(l))?;
    say(&format!(
        "searched in {:.1} s{}",
        clock.elapsed().as_secs_f64(),
        crate::cpu_time::describe(crate::cpu_time::since(cpu))
    ));
    say("");
    say(cal.table().trim_end());
    say("");
    say(&format!(
        "the best fit's replay arguments: {}",
        cal.best.args.join(" ")
    ));
    write_outputs(cli, &cal, &say)
}

/// Says what the calibration replays: its windows, loads and held-out windows.
fn say_plan(spec: &Spec, plan: &Plan, say: &dyn Fn(&str)) {
    let names = |w: &[search::Window]| {
        w.iter()
            .map(|w| format!("{} ({})", w.name, w.args.join(" ")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    say(&format!(
        "calibrating {} knobs with {} candidates, each replayed on {} at loads {:?} (the q{} \
         of its scores is minimised); held out: {}",
        spec.knobs.len(),
        spec.candidates,
        names(&plan.train),
        plan.loads,
        plan.quantile,
        if plan.holdout.is_empty() {
            "none".into()
        } else {
            names(&plan.holdout)
        }
    ));
    say(&format!(
        "each replay: replay {} WINDOW KNOBS --fit {}",
        plan.base.join(" "),
        plan.targets
    ));
}

/// Writes `calibrate.json` and the sensitivity plot into `--out`; returns
/// the JSON.
fn write_outputs(
    cli: &CalibrateCli,
    cal: &Calibration,
    say: &dyn Fn(&str),
) -> Result<String, ReplayError> {
    std::fs::create_dir_all(&cli.out).map_err(|source| ReplayError::Write {
        file: cli.out.display().to_string(),
        source,
    })?;
    let json = serde_json::to_string_pretty(cal)
        .map_err(|e| ReplayError::Usage(format!("cannot encode the calibration: {e}")))?;
    let path = cli.out.join("calibrate.json");
    std::fs::write(&path, &json).map_err(|source| ReplayError::Write {
        file: path.display().to_string(),
        source,
    })?;
    say(&format!("wrote {}", path.display()));
    if let Some(s) = &cal.sensitivity {
        let svg = cli.out.join("sensitivity.svg");
        sensitivity_plot::write(&svg, s)?;
        say(&format!("wrote {}", svg.display()));
    }
    Ok(json)
}

/// Runs `replay calibrate` in this process (replays on threads).
pub fn run_local(cli: &CalibrateCli) -> Result<String, ReplayError> {
    let threads = cli.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let mut evaluate = search::local_evaluator(threads);
    run(cli, &mut evaluate)
}
