//! The `replay calibrate` command line.

use std::path::PathBuf;

use clap::Parser;

use super::search::{self, Calibration, Evaluate, Plan, Spec};
use crate::cli::ReplayError;

/// Fits the model's knobs (arrival scale, quotas, lending, the delay
/// ladder, per-job relaxation deadlines, round interval...) to observed
/// targets: a seeded Latin-hypercube search of candidate replays on the
/// first half of the trace window, then the best and the start replayed
/// on the second half (held out). Prints the fit table and writes
/// `calibrate.json`.
///
/// The replay's own arguments (trace, topology, policies, window) follow
/// `--`; with `--trace`, `--jobs N` (and `--skip A`) give the window to
/// split. Targets: `philly` (the study's figures; see
/// `host-examples/replay/src/calibrate/philly-targets.toml` for the file format) or a
/// file of yours. Knobs and ranges: the built-in specification
/// (`host-examples/replay/src/calibrate/philly-calibration.toml`) or `--spec FILE`.
/// Knobs: time_scale, quota_factor, lend, first_widen_s,
/// second_widen_ratio, deadline_spread, gang_deadline_factor, placement,
/// round_interval_s, view_window.
#[derive(Debug, Parser)]
#[command(name = "replay calibrate", version)]
pub struct CalibrateCli {
    /// The search: knobs with ranges, start, candidates (TOML).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// What to match: `philly` or a targets file (TOML).
    #[arg(long, default_value = "philly")]
    pub targets: String,
    /// Candidate replays on the training window (overrides the spec's).
    #[arg(long)]
    pub candidates: Option<usize>,
    /// Seeds the search (overrides the spec's).
    #[arg(long)]
    pub search_seed: Option<u64>,
    /// Replays run at once (default: the machine's CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Train on the whole window; no held-out validation.
    #[arg(long)]
    pub no_holdout: bool,
    /// Output directory for calibrate.json.
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
    let plan = Plan::new(cli.replay_args.clone(), &cli.targets, !cli.no_holdout)?;
    let say = |line: &str| {
        if !cli.quiet {
            println!("{line}");
        }
    };
    say(&format!(
        "calibrating {} knobs with {} candidates on {} (held out: {})",
        spec.knobs.len(),
        spec.candidates,
        plan.train.join(" "),
        plan.holdout.as_ref().map_or("none".into(), |h| h.join(" "))
    ));
    let clock = std::time::Instant::now();
    let cal: Calibration = search::calibrate(&spec, &plan, evaluate, &mut |l| say(l))?;
    say(&format!(
        "searched in {:.1} s",
        clock.elapsed().as_secs_f64()
    ));
    say("");
    say(cal.table().trim_end());
    say("");
    say(&format!(
        "the best fit's replay arguments: {}",
        cal.best.args.join(" ")
    ));
    std::fs::create_dir_all(&cli.out).map_err(|source| ReplayError::Write {
        file: cli.out.display().to_string(),
        source,
    })?;
    let json = serde_json::to_string_pretty(&cal)
        .map_err(|e| ReplayError::Usage(format!("cannot encode the calibration: {e}")))?;
    let path = cli.out.join("calibrate.json");
    std::fs::write(&path, &json).map_err(|source| ReplayError::Write {
        file: path.display().to_string(),
        source,
    })?;
    say(&format!("wrote {}", path.display()));
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
