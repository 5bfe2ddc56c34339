//! What a calibration searches (`--spec`, a TOML file; the built-in one is
//! `philly-calibration.toml`): the knobs' ranges and start, how many
//! candidates, the windows and loads each candidate is replayed on, and
//! the sensitivity report around the best fit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::knobs::{Knob, Range, Setting, Value};
use crate::cli::ReplayError;

/// The built-in calibration specification (`philly-calibration.toml`).
pub const PHILLY_CALIBRATION: &str = include_str!("philly-calibration.toml");

/// A part of the replay's trace window as fractions of it: `[0, 0.5]` is
/// its first half, `[1, 1.25]` the quarter's worth of jobs after it.
pub type Span = [f64; 2];

/// What to search: how many candidates, the knobs' ranges and the start,
/// the windows and the sensitivity report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spec {
    /// Candidate settings tried, the start included.
    pub candidates: usize,
    /// The share of candidates spent refining around the best so far.
    pub refine_share: f64,
    /// How many refining stages share them, each in a box half as wide.
    pub refine_stages: usize,
    /// Seeds the search.
    pub seed: u64,
    /// The knobs searched and their ranges.
    pub knobs: BTreeMap<Knob, Range>,
    /// The starting point (candidate 0).
    pub start: Setting,
    /// The windows and loads each candidate is replayed on.
    pub windows: Windows,
    /// The sensitivity report around the best fit.
    pub sensitivity: Sensitivity,
}

/// The replays that score a candidate, and those that validate the best.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Windows {
    /// The training windows, each replayed on its own as a user runs it
    /// (`--skip/--jobs` of that part of the window).
    pub train: Vec<Span>,
    /// Held-out windows: the start and the best are replayed on them after
    /// the search, which never sees them.
    pub holdout: Vec<Span>,
    /// Factors on a candidate's time scale: every training window is
    /// replayed at each (`[0.97, 1, 1.03]`: its load and 3 % either side).
    pub loads: Vec<f64>,
    /// Which of a candidate's training scores the search minimises: the
    /// nearest-rank quantile `quantile` of them (1: the worst).
    pub quantile: f64,
}

impl Default for Windows {
    /// Train on the first half, hold out the second, at the load given.
    fn default() -> Self {
        Windows {
            train: vec![[0.0, 0.5]],
            holdout: vec![[0.5, 1.0]],
            loads: vec![1.0],
            quantile: 1.0,
        }
    }
}

/// The sensitivity report: the best fit replayed with its time scale and
/// quota factor moved, one at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sensitivity {
    /// Factors on the best fit's time scale (empty: none).
    pub time_scale: Vec<f64>,
    /// Factors on its quota factor (empty: none).
    pub quota_factor: Vec<f64>,
    /// The window replayed.
    pub window: Span,
}

impl Default for Sensitivity {
    /// No sensitivity replays; the whole window when there are some.
    fn default() -> Self {
        Sensitivity {
            time_scale: Vec::new(),
            quota_factor: Vec::new(),
            window: [0.0, 1.0],
        }
    }
}

impl Spec {
    /// Parses a specification's TOML; `origin` names it in errors.
    ///
    /// ```
    /// use gangway_replay::calibrate::spec::{Spec, PHILLY_CALIBRATION};
    /// let spec = Spec::parse(PHILLY_CALIBRATION, "built-in").unwrap();
    /// assert!(spec.candidates >= 10);
    /// let e = Spec::parse("[knobs]\nspeed = [1, 2]", "c.toml").unwrap_err();
    /// assert!(e.to_string().contains("c.toml: unknown knob \"speed\""), "{e}");
    /// let e = Spec::parse("[windows]\ntrain = [[0.5, 0.2]]", "c.toml").unwrap_err();
    /// assert!(e.to_string().contains("c.toml: window [0.5, 0.2]"), "{e}");
    /// ```
    pub fn parse(text: &str, origin: &str) -> Result<Spec, ReplayError> {
        let bad = |what: String| ReplayError::Usage(format!("{origin}: {what}"));
        let table: toml::Table = toml::from_str(text).map_err(|e| bad(e.message().to_string()))?;
        let mut spec = Spec {
            candidates: 50,
            refine_share: 0.4,
            refine_stages: 1,
            seed: 1,
            knobs: BTreeMap::new(),
            start: Setting::new(),
            windows: Windows::default(),
            sensitivity: Sensitivity::default(),
        };
        for (key, value) in &table {
            spec.set(key, value, origin)?;
        }
        spec.check().map_err(bad)?;
        Ok(spec)
    }

    /// Sets the entry `key = value` of a specification file.
    fn set(&mut self, key: &str, value: &toml::Value, origin: &str) -> Result<(), ReplayError> {
        let bad = |what: String| ReplayError::Usage(format!("{origin}: {what}"));
        match (key, value) {
            ("candidates", toml::Value::Integer(n)) if *n >= 1 => {
                self.candidates = usize::try_from(*n).map_err(|_| bad("candidates".into()))?;
            }
            ("refine_share", toml::Value::Float(f)) if (0.0..1.0).contains(f) => {
                self.refine_share = *f;
            }
            ("refine_share", toml::Value::Integer(0)) => self.refine_share = 0.0,
            ("refine_stages", toml::Value::Integer(n)) if *n >= 1 => {
                self.refine_stages =
                    usize::try_from(*n).map_err(|_| bad("refine_stages".into()))?;
            }
            ("seed", toml::Value::Integer(n)) if *n >= 0 => {
                self.seed = u64::try_from(*n).map_err(|_| bad("seed".into()))?;
            }
            ("knobs", toml::Value::Table(t)) => {
                for (name, range) in t {
                    let knob = knob_named(name, origin)?;
                    self.knobs.insert(knob, range_of(knob, range, origin)?);
                }
            }
            ("start", toml::Value::Table(t)) => {
                for (name, v) in t {
                    let knob = knob_named(name, origin)?;
                    self.start.insert(knob, value_of(knob, v, origin)?);
                }
            }
            ("windows", toml::Value::Table(_)) => {
                self.windows = value
                    .clone()
                    .try_into()
                    .map_err(|e| bad(format!("[windows]: {e}")))?;
            }
            ("sensitivity", toml::Value::Table(_)) => {
                self.sensitivity = value
                    .clone()
                    .try_into()
                    .map_err(|e| bad(format!("[sensitivity]: {e}")))?;
            }
            (k, v) => {
                return Err(bad(format!(
                    "unexpected {k} = {v} (expected candidates >= 1, refine_share in [0, 1), \
                     refine_stages >= 1, seed >= 0, [knobs], [start], [windows], [sensitivity])"
                )));
            }
        }
        Ok(())
    }

    /// What is wrong with the windows and the sensitivity report, if anything.
    fn check(&self) -> Result<(), String> {
        let w = &self.windows;
        let s = &self.sensitivity;
        if w.train.is_empty() {
            return Err("[windows] train needs at least one window".into());
        }
        for span in w.train.iter().chain(&w.holdout).chain([&s.window]) {
            if !(span[0] < span[1] && span.iter().all(|x| x.is_finite())) {
                return Err(format!(
                    "window [{}, {}]: expected [from, to] with from < to (fractions of the \
                     replay's window)",
                    span[0], span[1]
                ));
            }
        }
        let factors = w.loads.iter().chain(&s.time_scale).chain(&s.quota_factor);
        if w.loads.is_empty() || factors.clone().any(|f| !(*f > 0.0 && f.is_finite())) {
            return Err(
                "loads and sensitivity factors must be positive numbers, and [windows] \
                        loads needs at least one"
                    .into(),
            );
        }
        if !(w.quantile > 0.0 && w.quantile <= 1.0) {
            return Err(format!(
                "[windows] quantile = {}: expected (0, 1] (1: the worst window)",
                w.quantile
            ));
        }
        Ok(())
    }

    /// The built-in specification, or the file at `path`.
    pub fn load(path: Option<&std::path::Path>) -> Result<Spec, ReplayError> {
        match path {
            None => Spec::parse(PHILLY_CALIBRATION, "built-in calibration"),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    ReplayError::Usage(format!("{}: cannot read: {e}", p.display()))
                })?;
                Spec::parse(&text, &p.display().to_string())
            }
        }
    }

    /// The starting setting: `start`, with every searched knob it lacks at
    /// the model's default.
    pub(crate) fn start_setting(&self) -> Setting {
        let mut s = self.start.clone();
        for k in self.knobs.keys() {
            s.entry(*k).or_insert_with(|| k.default_value());
        }
        s
    }
}

fn knob_named(name: &str, origin: &str) -> Result<Knob, ReplayError> {
    Knob::named(name).ok_or_else(|| {
        ReplayError::Usage(format!(
            "{origin}: unknown knob {name:?} (knobs: {})",
            Knob::ALL.map(Knob::as_str).join(", ")
        ))
    })
}

fn value_of(knob: Knob, v: &toml::Value, origin: &str) -> Result<Value, ReplayError> {
    let numeric = matches!(knob.default_value(), Value::Number(_));
    match (v, numeric) {
        (toml::Value::Integer(i), true) => Ok(Value::Number(*i as f64)),
        (toml::Value::Float(f), true) if f.is_finite() && *f >= 0.0 => Ok(Value::Number(*f)),
        (toml::Value::Boolean(b), false) => Ok(Value::Choice(b.to_string())),
        (toml::Value::String(s), false) => Ok(Value::Choice(s.clone())),
        _ => Err(ReplayError::Usage(format!(
            "{origin}: knob {} takes {}, not {v}",
            knob.as_str(),
            if numeric { "a number" } else { "a choice" }
        ))),
    }
}

fn range_of(knob: Knob, v: &toml::Value, origin: &str) -> Result<Range, ReplayError> {
    let bad = || {
        ReplayError::Usage(format!(
            "{origin}: knob {} needs [low, high] with 0 <= low < high, or a list of choices, \
             not {v}",
            knob.as_str()
        ))
    };
    let toml::Value::Array(items) = v else {
        return Err(bad());
    };
    let values: Vec<Value> = items
        .iter()
        .map(|i| value_of(knob, i, origin))
        .collect::<Result<_, _>>()?;
    match values.as_slice() {
        [Value::Number(lo), Value::Number(hi)] if lo < hi => {
            if knob.log_scale() && *lo <= 0.0 {
                return Err(bad());
            }
            Ok(Range::Between(*lo, *hi))
        }
        choices if !choices.is_empty() && choices.iter().all(|c| matches!(c, Value::Choice(_))) => {
            Ok(Range::OneOf(
                choices.iter().map(ToString::to_string).collect(),
            ))
        }
        _ => Err(bad()),
    }
}
