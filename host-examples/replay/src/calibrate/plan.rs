//! The replays a calibration runs: the arguments every candidate shares,
//! the windows it is scored on (each replayed on its own, as a user runs
//! it), the loads, and the held-out and sensitivity windows.

use serde::Serialize;

use super::knobs::{self, Knob, Setting, Value};
use super::spec::{Span, Spec};
use crate::cli::{DEFAULT_GENERATED_TIME_SCALE, ReplayError};

/// One window a calibration replays: its name and the arguments that
/// select it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Window {
    /// `whole`, `0..0.5`, `1..1.25` (the span of the replay's window) or
    /// `seed 6` (a generated workload).
    pub name: String,
    /// `--skip A --jobs N`, or `--jobs N --seed S`.
    pub args: Vec<String>,
}

/// The replays of a calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Arguments every replay shares (the trace, topology, policies...),
    /// without the window's.
    pub base: Vec<String>,
    /// The training windows: every candidate is replayed on each, at each load.
    pub train: Vec<Window>,
    /// Factors on a candidate's time scale for its training replays.
    pub loads: Vec<f64>,
    /// The quantile of a candidate's training scores the search minimises.
    pub quantile: f64,
    /// The held-out windows (the start and the best only, at load 1).
    pub holdout: Vec<Window>,
    /// The sensitivity report's window.
    pub sensitivity: Window,
    /// The targets: `philly` or a file.
    pub targets: String,
    /// The time scale of a setting without one (1 for a trace, the
    /// generator's default for a generated workload).
    pub default_time_scale: f64,
}

/// Removes `flag VALUE` (or `flag=VALUE`) from `args`, returning the value.
fn take_flag(args: &mut Vec<String>, flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    let i = args.iter().position(|a| a == flag || a.starts_with(&eq))?;
    let a = args.remove(i);
    match a.strip_prefix(&eq) {
        Some(v) => Some(v.to_string()),
        None => (i < args.len()).then(|| args.remove(i)),
    }
}

/// `x` written short: `0.5`, `0.125`, `1`.
fn short(x: f64) -> String {
    let s = format!("{:.4}", x);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A span's name: `whole` for `[0, 1]`, else `from..to`.
fn span_name(span: &Span) -> String {
    if *span == [0.0, 1.0] {
        "whole".into()
    } else {
        format!("{}..{}", short(span[0]), short(span[1]))
    }
}

/// The window `span` of a trace's window of `jobs` jobs after `skip`.
fn trace_window(span: &Span, skip: usize, jobs: usize) -> Result<Window, ReplayError> {
    let at = |f: f64| skip as f64 + f * jobs as f64;
    let (from, to) = (at(span[0]).round(), at(span[1]).round());
    if from < 0.0 || to <= from {
        return Err(ReplayError::Usage(format!(
            "window [{}, {}] of --skip {skip} --jobs {jobs} is jobs {from}..{to}: it must hold \
             jobs and start at the trace's first job or later",
            span[0], span[1]
        )));
    }
    let (from, to) = (from as usize, to as usize);
    Ok(Window {
        name: span_name(span),
        args: vec![
            "--skip".into(),
            from.to_string(),
            "--jobs".into(),
            (to - from).to_string(),
        ],
    })
}

/// The window of a generated workload of `jobs` jobs from `seed`.
fn seed_window(jobs: usize, seed: u64) -> Window {
    Window {
        name: format!("seed {seed}"),
        args: vec![
            "--jobs".into(),
            jobs.to_string(),
            "--seed".into(),
            seed.to_string(),
        ],
    }
}

impl Plan {
    /// The plan for `replay_args` (a `replay` command line) under `spec`:
    /// with a `--trace`, the spans of `spec.windows` of its window
    /// (`--skip A --jobs N`, `--jobs` required), without held-out windows
    /// unless `holdout`; on the built-in generator, training uses
    /// `--seed S` and the held-out run `S + 1` (each `--jobs` jobs,
    /// default 6,000).
    ///
    /// ```
    /// use gangway_replay::calibrate::{plan::Plan, spec::Spec};
    /// let spec = Spec::parse("[windows]\ntrain = [[0, 1], [0, 0.5]]\nholdout = [[1, 1.5]]", "s").unwrap();
    /// let args = ["--trace", "t.csv", "--format", "rfold", "--skip", "100", "--jobs", "1000"];
    /// let p = Plan::new(args.map(String::from).to_vec(), "philly", &spec, true).unwrap();
    /// assert_eq!(p.base, ["--trace", "t.csv", "--format", "rfold", "--native"]);
    /// assert_eq!(p.train[0].args, ["--skip", "100", "--jobs", "1000"]);
    /// assert_eq!((p.train[1].name.as_str(), p.train[1].args[3].as_str()), ("0..0.5", "500"));
    /// assert_eq!(p.holdout[0].args, ["--skip", "1100", "--jobs", "500"]);
    /// ```
    pub fn new(
        mut replay_args: Vec<String>,
        targets: &str,
        spec: &Spec,
        holdout: bool,
    ) -> Result<Plan, ReplayError> {
        refuse_knob_flags(&replay_args)?;
        let usage =
            |what: &str, v: &str| ReplayError::Usage(format!("{what} {v:?}: expected a number"));
        let num = |flag: &str, v: Option<String>| -> Result<Option<usize>, ReplayError> {
            v.map(|v| v.parse::<usize>().map_err(|_| usage(flag, &v)))
                .transpose()
        };
        let skip = num("--skip", take_flag(&mut replay_args, "--skip"))?;
        let jobs = num("--jobs", take_flag(&mut replay_args, "--jobs"))?;
        let has_trace = replay_args
            .iter()
            .any(|a| a == "--trace" || a.starts_with("--trace="));
        let w = &spec.windows;
        let (train, held, sensitivity, default_time_scale) = if has_trace {
            let jobs = jobs.ok_or_else(|| {
                ReplayError::Usage(
                    "calibrate needs the trace window's size (--jobs N, with --skip A): it \
                     replays parts of it (the specification's [windows])"
                        .into(),
                )
            })?;
            let skip = skip.unwrap_or(0);
            let of = |spans: &[Span]| -> Result<Vec<Window>, ReplayError> {
                spans.iter().map(|s| trace_window(s, skip, jobs)).collect()
            };
            let sensitivity = trace_window(&spec.sensitivity.window, skip, jobs)?;
            (of(&w.train)?, of(&w.holdout)?, sensitivity, 1.0)
        } else {
            if skip.is_some() {
                return Err(ReplayError::Usage(
                    "--skip windows a --trace; the built-in generator validates on another seed"
                        .into(),
                ));
            }
            let seed = num("--seed", take_flag(&mut replay_args, "--seed"))?.unwrap_or(1) as u64;
            let jobs = jobs.unwrap_or(6_000);
            let held = (!w.holdout.is_empty()).then(|| seed_window(jobs, seed + 1));
            let train = seed_window(jobs, seed);
            (
                vec![train.clone()],
                held.into_iter().collect(),
                train,
                DEFAULT_GENERATED_TIME_SCALE,
            )
        };
        if !replay_args.iter().any(|a| a == "--native") {
            // Built-in policies decide alike natively and as Wasm (tested);
            // modules given by path still run as Wasm.
            replay_args.push("--native".into());
        }
        Ok(Plan {
            base: replay_args,
            train,
            loads: w.loads.clone(),
            quantile: w.quantile,
            holdout: if holdout { held } else { Vec::new() },
            sensitivity,
            targets: targets.to_string(),
            default_time_scale,
        })
    }

    /// `setting` with its time scale times `load` (the knobs that make
    /// `replay` arguments, so a load of 1 leaves it as it is).
    pub fn at_load(&self, setting: &Setting, load: f64) -> Setting {
        let mut s = setting.clone();
        if load != 1.0 {
            let scale = match s.get(&Knob::TimeScale) {
                Some(Value::Number(x)) => *x,
                _ => self.default_time_scale,
            };
            s.insert(
                Knob::TimeScale,
                Value::Number(Knob::TimeScale.snap(scale * load)),
            );
        }
        s
    }

    /// The knobs' and the window's arguments of one replay: what a user
    /// adds to [`Plan::base`] to run it.
    pub fn replay_args(&self, window: &Window, setting: &Setting) -> Vec<String> {
        let mut a = window.args.clone();
        a.extend(knobs::args_of(setting));
        a
    }

    /// The arguments of one candidate replay on `window` (without `--out`,
    /// which the evaluator chooses).
    pub fn argv(&self, window: &Window, setting: &Setting) -> Vec<String> {
        let mut a = self.base.clone();
        a.extend(self.replay_args(window, setting));
        a.extend([
            "--fit".into(),
            self.targets.clone(),
            "--no-plots".into(),
            "--quiet".into(),
        ]);
        a
    }
}

/// Refuses a replay command line that sets what the calibration sets.
fn refuse_knob_flags(replay_args: &[String]) -> Result<(), ReplayError> {
    for a in replay_args {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        if knobs::KNOB_FLAGS.contains(&name) || ["--out", "--fit", "--compare"].contains(&name) {
            return Err(ReplayError::Usage(format!(
                "calibrate sets {name} itself (knobs: {}); leave it out of the replay's arguments",
                knobs::KNOB_FLAGS.join(", ")
            )));
        }
    }
    Ok(())
}
