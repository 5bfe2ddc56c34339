//! The calibration itself: its specification, the candidates of a seeded
//! Latin-hypercube search, their replays (through a caller's evaluator, so
//! the same search runs on threads or on Ray), the best fit and its
//! held-out validation.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rand::{Rng, SeedableRng, seq::SliceRandom};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fit::{Fit, fmt};
use super::knobs::{self, Knob, Range, Setting, Value};
use super::targets::Targets;
use crate::cli::ReplayError;

/// The built-in calibration specification (`philly-calibration.toml`).
pub const PHILLY_CALIBRATION: &str = include_str!("philly-calibration.toml");

/// What to search: how many candidates, the knobs' ranges and the start.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spec {
    /// Candidate replays on the training window, the start included.
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
}

impl Spec {
    /// Parses a specification's TOML; `origin` names it in errors.
    ///
    /// ```
    /// use gangway_replay::calibrate::search::{Spec, PHILLY_CALIBRATION};
    /// let spec = Spec::parse(PHILLY_CALIBRATION, "built-in").unwrap();
    /// assert_eq!(spec.candidates, 50);
    /// let e = Spec::parse("[knobs]\nspeed = [1, 2]", "c.toml").unwrap_err();
    /// assert!(e.to_string().contains("c.toml: unknown knob \"speed\""), "{e}");
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
        };
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("candidates", toml::Value::Integer(n)) if *n >= 1 => {
                    spec.candidates = usize::try_from(*n).map_err(|_| bad("candidates".into()))?;
                }
                ("refine_share", toml::Value::Float(f)) if (0.0..1.0).contains(f) => {
                    spec.refine_share = *f;
                }
                ("refine_share", toml::Value::Integer(0)) => spec.refine_share = 0.0,
                ("refine_stages", toml::Value::Integer(n)) if *n >= 1 => {
                    spec.refine_stages =
                        usize::try_from(*n).map_err(|_| bad("refine_stages".into()))?;
                }
                ("seed", toml::Value::Integer(n)) if *n >= 0 => {
                    spec.seed = u64::try_from(*n).map_err(|_| bad("seed".into()))?;
                }
                ("knobs", toml::Value::Table(t)) => {
                    for (name, range) in t {
                        let knob = knob_named(name, origin)?;
                        spec.knobs.insert(knob, range_of(knob, range, origin)?);
                    }
                }
                ("start", toml::Value::Table(t)) => {
                    for (name, v) in t {
                        let knob = knob_named(name, origin)?;
                        spec.start.insert(knob, value_of(knob, v, origin)?);
                    }
                }
                (k, v) => {
                    return Err(bad(format!(
                        "unexpected {k} = {v} (expected candidates >= 1, refine_share in [0, 1), refine_stages >= 1, \
                         seed >= 0, [knobs], [start])"
                    )));
                }
            }
        }
        Ok(spec)
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
    fn start_setting(&self) -> Setting {
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

/// `n` settings of a Latin hypercube over `ranges` (each knob's range in
/// `n` strata, each used once, in a seeded order), with the knobs of
/// `fixed` that `ranges` lacks as given.
pub fn latin_hypercube(
    ranges: &BTreeMap<Knob, Range>,
    fixed: &Setting,
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Setting> {
    let mut out: Vec<Setting> = (0..n).map(|_| fixed.clone()).collect();
    for (knob, range) in ranges {
        let mut strata: Vec<usize> = (0..n).collect();
        strata.shuffle(rng);
        for (setting, stratum) in out.iter_mut().zip(strata) {
            let u = (stratum as f64 + rng.random::<f64>()) / n as f64;
            let value = match range {
                Range::Between(lo, hi) => {
                    let x = if knob.log_scale() {
                        (lo.ln() + u * (hi.ln() - lo.ln())).exp()
                    } else {
                        lo + u * (hi - lo)
                    };
                    Value::Number(knob.snap(x.clamp(*lo, *hi)))
                }
                Range::OneOf(choices) => {
                    let i = (stratum * choices.len() / n).min(choices.len() - 1);
                    Value::Choice(choices[i].clone())
                }
            };
            setting.insert(*knob, value);
        }
    }
    out
}

/// The ranges of a refining stage: `fraction` of each numeric range's width
/// (on its scale) centred on `best`'s value, inside the range; choices
/// fixed at `best`'s.
fn around(ranges: &BTreeMap<Knob, Range>, best: &Setting, fraction: f64) -> BTreeMap<Knob, Range> {
    ranges
        .iter()
        .map(|(k, r)| {
            let narrowed = match (r, best.get(k)) {
                (Range::Between(lo, hi), Some(Value::Number(b))) => {
                    let log = k.log_scale();
                    let f = |x: f64| if log { x.ln() } else { x };
                    let inv = |x: f64| if log { x.exp() } else { x };
                    let half = (f(*hi) - f(*lo)) * fraction / 2.0;
                    let c = f(*b).clamp(f(*lo) + half, f(*hi) - half);
                    Range::Between(inv(c - half).max(*lo), inv(c + half).min(*hi))
                }
                (Range::OneOf(_), Some(v)) => Range::OneOf(vec![v.to_string()]),
                (r, _) => r.clone(),
            };
            (*k, narrowed)
        })
        .collect()
}

/// The replays a calibration runs: shared arguments and the two windows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Arguments every candidate replay shares (the trace, topology,
    /// policies...), without the window's.
    pub base: Vec<String>,
    /// The training window's arguments.
    pub train: Vec<String>,
    /// The held-out window's arguments (`None`: no validation).
    pub holdout: Option<Vec<String>>,
    /// The targets: `philly` or a file.
    pub targets: String,
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

impl Plan {
    /// The plan for `replay_args` (a `replay` command line): with a
    /// `--trace`, its window (`--skip A --jobs N`, `--jobs` required) is
    /// split in halves, training on the first and validating on the
    /// second; on the built-in generator, training uses `--seed S` and
    /// validation `S + 1` (each `--jobs` jobs, default 6,000).
    ///
    /// ```
    /// use gangway_replay::calibrate::search::Plan;
    /// let args = ["--trace", "t.csv", "--format", "rfold", "--skip", "100", "--jobs", "1001"];
    /// let p = Plan::new(args.map(String::from).to_vec(), "philly", true).unwrap();
    /// assert_eq!(p.base, ["--trace", "t.csv", "--format", "rfold", "--native"]);
    /// assert_eq!(p.train, ["--skip", "100", "--jobs", "500"]);
    /// assert_eq!(p.holdout.unwrap(), ["--skip", "600", "--jobs", "501"]);
    /// ```
    pub fn new(
        mut replay_args: Vec<String>,
        targets: &str,
        holdout: bool,
    ) -> Result<Plan, ReplayError> {
        for a in &replay_args {
            let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
            if knobs::KNOB_FLAGS.contains(&name) || ["--out", "--fit", "--compare"].contains(&name)
            {
                return Err(ReplayError::Usage(format!(
                    "calibrate sets {name} itself (knobs: {}); leave it out of the replay's arguments",
                    knobs::KNOB_FLAGS.join(", ")
                )));
            }
        }
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
        let s = |x: usize| x.to_string();
        let (train, holdout_args) = if has_trace {
            let jobs = jobs.ok_or_else(|| {
                ReplayError::Usage(
                    "calibrate needs the trace window's size (--jobs N, with --skip A): it \
                     trains on the first half and validates on the second"
                        .into(),
                )
            })?;
            let skip = skip.unwrap_or(0);
            let half = if holdout { jobs / 2 } else { jobs };
            if half == 0 {
                return Err(ReplayError::Usage(format!(
                    "--jobs {jobs}: too few jobs to split"
                )));
            }
            (
                vec!["--skip".into(), s(skip), "--jobs".into(), s(half)],
                vec![
                    "--skip".into(),
                    s(skip + half),
                    "--jobs".into(),
                    s(jobs - half),
                ],
            )
        } else {
            if skip.is_some() {
                return Err(ReplayError::Usage(
                    "--skip windows a --trace; the built-in generator validates on another seed"
                        .into(),
                ));
            }
            let seed = num("--seed", take_flag(&mut replay_args, "--seed"))?.unwrap_or(1);
            let jobs = s(jobs.unwrap_or(6_000));
            (
                vec!["--jobs".into(), jobs.clone(), "--seed".into(), s(seed)],
                vec!["--jobs".into(), jobs, "--seed".into(), s(seed + 1)],
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
            holdout: holdout.then_some(holdout_args),
            targets: targets.to_string(),
        })
    }

    /// The arguments of one candidate replay on `window` (without `--out`,
    /// which the evaluator chooses).
    pub fn argv(&self, window: &[String], setting: &Setting) -> Vec<String> {
        let mut a = self.base.clone();
        a.extend(window.iter().cloned());
        a.extend(knobs::args_of(setting));
        a.extend([
            "--fit".into(),
            self.targets.clone(),
            "--no-plots".into(),
            "--quiet".into(),
        ]);
        a
    }
}

/// Runs replays: takes argument lists (without `--out`) and returns, for
/// each, the text of its `report.json` or why it failed.
pub type Evaluate<'a> = dyn FnMut(&[Vec<String>]) -> Vec<Result<String, String>> + 'a;

/// One candidate tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    /// Its index (0: the start).
    pub index: usize,
    /// 0: the start, 1: the first hypercube, 2: the refining one.
    pub stage: u8,
    /// Its knobs.
    pub setting: Setting,
    /// Its score on the training window (lower is better; `null` if it failed).
    pub score: Option<f64>,
    /// Targets met.
    pub met: usize,
    /// Why its replay failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A setting's fit on both windows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Assessed {
    /// Its knobs.
    pub setting: Setting,
    /// The replay arguments that set them (add the window's).
    pub args: Vec<String>,
    /// Its fit on the training window.
    pub train: Fit,
    /// Its fit on the held-out window.
    pub holdout: Option<Fit>,
}

/// What a calibration found (`calibrate.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    /// What was searched.
    pub spec: Spec,
    /// Which replays.
    pub plan: Plan,
    /// The start.
    pub start: Assessed,
    /// The best candidate.
    pub best: Assessed,
    /// Every candidate, in order.
    pub candidates: Vec<Candidate>,
}

fn fit_of(report: &str) -> Result<Fit, String> {
    let v: serde_json::Value =
        serde_json::from_str(report).map_err(|e| format!("report.json: {e}"))?;
    let fit = v
        .pointer("/runs/0/fit")
        .ok_or("report.json has no fit (was --fit given?)")?;
    Fit::deserialize(fit).map_err(|e| format!("fit: {e}"))
}

/// Runs the calibration `spec` over `plan`, each batch of replays through
/// `evaluate`; `progress` hears one line per stage.
pub fn calibrate(
    spec: &Spec,
    plan: &Plan,
    evaluate: &mut Evaluate<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<Calibration, ReplayError> {
    let mut search = Search {
        plan,
        evaluate,
        rng: ChaCha8Rng::seed_from_u64(spec.seed),
        candidates: Vec::new(),
    };
    let start = spec.start_setting();
    let total = spec.candidates.max(1);
    let refine = ((total - 1) as f64 * spec.refine_share).round() as usize;
    search.first_stage(spec, &start, total - 1 - refine)?;
    let b = search.best();
    progress(&format!(
        "stage 1: {} candidates, best #{b} score {} (start {})",
        search.candidates.len(),
        score_str(search.candidates[b].score),
        score_str(search.candidates[0].score)
    ));
    search.refine(spec, refine, progress)?;
    let best = search.candidates[search.best()].setting.clone();
    let (start_assessed, best_assessed) = search.assess(&start, &best)?;
    Ok(Calibration {
        spec: spec.clone(),
        plan: plan.clone(),
        start: start_assessed,
        best: best_assessed,
        candidates: search.candidates,
    })
}

/// A calibration under way: the replays run so far and the draws still
/// to come.
struct Search<'p, 'e, 'f> {
    plan: &'p Plan,
    evaluate: &'e mut Evaluate<'f>,
    rng: ChaCha8Rng,
    /// Every candidate so far, in order.
    candidates: Vec<Candidate>,
}

impl Search<'_, '_, '_> {
    /// Replays `settings` on the training window as stage `stage`, adding
    /// them to the candidates.
    fn run_stage(&mut self, stage: u8, settings: Vec<Setting>) -> Result<(), ReplayError> {
        let argvs: Vec<Vec<String>> = settings
            .iter()
            .map(|s| self.plan.argv(&self.plan.train, s))
            .collect();
        let results = (self.evaluate)(&argvs);
        if results.len() != argvs.len() {
            return Err(ReplayError::Usage(format!(
                "the evaluator returned {} reports for {} replays",
                results.len(),
                argvs.len()
            )));
        }
        for (setting, result) in settings.into_iter().zip(results) {
            let fit = result.and_then(|text| fit_of(&text));
            let index = self.candidates.len();
            self.candidates.push(match fit {
                Ok(f) => Candidate {
                    index,
                    stage,
                    setting,
                    score: Some(f.score),
                    met: f.met,
                    error: None,
                },
                Err(e) => Candidate {
                    index,
                    stage,
                    setting,
                    score: None,
                    met: 0,
                    error: Some(e),
                },
            });
        }
        Ok(())
    }

    /// The index of the best candidate so far (lowest score, earliest on
    /// ties; the start if none scored).
    fn best(&self) -> usize {
        self.candidates
            .iter()
            .filter_map(|c| c.score.map(|s| (s, c.index)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map_or(0, |(_, i)| i)
    }

    /// Stage 1: the start (candidate 0, stage 0), and `n` candidates drawn
    /// over the knobs' whole ranges. Fails if the start's replay fails.
    fn first_stage(&mut self, spec: &Spec, start: &Setting, n: usize) -> Result<(), ReplayError> {
        let stage1: Vec<Setting> = std::iter::once(start.clone())
            .chain(latin_hypercube(&spec.knobs, start, n, &mut self.rng))
            .collect();
        self.run_stage(1, stage1)?;
        self.candidates[0].stage = 0;
        if let Some(e) = &self.candidates[0].error {
            return Err(ReplayError::Usage(format!(
                "the starting point's replay failed: {e}"
            )));
        }
        Ok(())
    }

    /// The refining stages, `refine` candidates in all: each searches a box
    /// half as wide as the last (a quarter of each range, then an
    /// eighth...) around the best so far.
    fn refine(
        &mut self,
        spec: &Spec,
        refine: usize,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), ReplayError> {
        let stages = spec.refine_stages.max(1);
        let mut fraction = 0.25;
        for stage in 0..stages {
            let n = refine / stages + usize::from(stage < refine % stages);
            if n == 0 {
                continue;
            }
            let centre = self.best();
            let box_ = around(&spec.knobs, &self.candidates[centre].setting, fraction);
            let fixed = self.candidates[centre].setting.clone();
            let settings = latin_hypercube(&box_, &fixed, n, &mut self.rng);
            let number = u8::try_from(stage + 2).unwrap_or(u8::MAX);
            self.run_stage(number, settings)?;
            let b = self.best();
            progress(&format!(
                "stage {number}: {n} candidates around #{centre} ({:.1} % of each range), best #{b} score {}",
                fraction * 100.0,
                score_str(self.candidates[b].score)
            ));
            fraction /= 2.0;
        }
        Ok(())
    }

    /// `start` and `best` on both windows: training fits again from their
    /// reports, so the record holds every item.
    fn assess(
        &mut self,
        start: &Setting,
        best: &Setting,
    ) -> Result<(Assessed, Assessed), ReplayError> {
        let plan = self.plan;
        let mut wanted = vec![plan.argv(&plan.train, start), plan.argv(&plan.train, best)];
        if let Some(h) = &plan.holdout {
            wanted.push(plan.argv(h, start));
            wanted.push(plan.argv(h, best));
        }
        let reports = (self.evaluate)(&wanted);
        let mut fits = Vec::new();
        for (i, r) in reports.into_iter().enumerate() {
            let fit = r.and_then(|t| fit_of(&t)).map_err(|e| {
                ReplayError::Usage(format!("replay {:?} failed: {e}", wanted.get(i)))
            })?;
            fits.push(fit);
        }
        if fits.len() != wanted.len() {
            return Err(ReplayError::Usage("the evaluator lost replays".into()));
        }
        let mut fits = fits.into_iter();
        let (st, bt) = (fits.next(), fits.next());
        let (sh, bh) = (fits.next(), fits.next());
        Ok((Assessed::of(start, st, sh), Assessed::of(best, bt, bh)))
    }
}

impl Assessed {
    /// `setting` with its fits (a missing training fit as an empty one).
    fn of(setting: &Setting, train: Option<Fit>, holdout: Option<Fit>) -> Self {
        Assessed {
            setting: setting.clone(),
            args: knobs::args_of(setting),
            train: train.unwrap_or_else(|| Fit {
                targets: String::new(),
                score: f64::NAN,
                met: 0,
                items: 0,
                detail: Vec::new(),
            }),
            holdout,
        }
    }
}

fn score_str(s: Option<f64>) -> String {
    s.map_or("failed".into(), |s| format!("{s:.3}"))
}

impl Calibration {
    /// The fit table (targets, start and best on both windows) and the
    /// knobs, as the console shows them.
    pub fn table(&self) -> String {
        let mut rows: Vec<Vec<String>> = Vec::new();
        let holdout = self.best.holdout.is_some();
        let mut head = vec![
            format!("target ({})", self.best.train.targets),
            "observed".into(),
            "start".into(),
            "best".into(),
        ];
        if holdout {
            head.extend(["start held-out".into(), "best held-out".into()]);
        }
        rows.push(head);
        let cell = |f: Option<&Fit>, i: usize| {
            f.and_then(|f| f.detail.get(i))
                .map_or("n/a".into(), |it| match it.model {
                    Some(m) => format!("{}{}", if it.met { "*" } else { "" }, fmt(m)),
                    None => "n/a".into(),
                })
        };
        for (i, it) in self.best.train.detail.iter().enumerate() {
            let mut r = vec![it.name.clone(), fmt(it.observed)];
            r.push(cell(Some(&self.start.train), i));
            r.push(cell(Some(&self.best.train), i));
            if holdout {
                r.push(cell(self.start.holdout.as_ref(), i));
                r.push(cell(self.best.holdout.as_ref(), i));
            }
            rows.push(r);
        }
        let summary = |f: Option<&Fit>| {
            f.map_or("n/a".into(), |f| {
                format!("{:.3}; {}/{}", f.score, f.met, f.items)
            })
        };
        let mut r = vec!["score; met (* = met)".into(), String::new()];
        r.push(summary(Some(&self.start.train)));
        r.push(summary(Some(&self.best.train)));
        if holdout {
            r.push(summary(self.start.holdout.as_ref()));
            r.push(summary(self.best.holdout.as_ref()));
        }
        rows.push(r);
        let mut out = super::text_table(&rows);
        out.push('\n');
        let mut knob_rows = vec![vec![
            "knob".to_string(),
            "range".into(),
            "start".into(),
            "best".into(),
        ]];
        for k in Knob::ALL {
            let (Some(s), Some(b)) = (self.start.setting.get(&k), self.best.setting.get(&k)) else {
                continue;
            };
            let range = match self.spec.knobs.get(&k) {
                Some(Range::Between(lo, hi)) => format!("{lo} .. {hi}"),
                Some(Range::OneOf(c)) => c.join(" | "),
                None => "fixed".into(),
            };
            knob_rows.push(vec![k.as_str().into(), range, s.to_string(), b.to_string()]);
        }
        out.push_str(&super::text_table(&knob_rows));
        out
    }
}

/// An evaluator running replays in this process on `threads` threads,
/// each in a fresh temporary folder.
pub fn local_evaluator(
    threads: usize,
) -> impl FnMut(&[Vec<String>]) -> Vec<Result<String, String>> {
    let threads = threads.max(1);
    move |argvs: &[Vec<String>]| {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<std::sync::Mutex<Option<Result<String, String>>>> =
            argvs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads.min(argvs.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(argv) = argvs.get(i) else { break };
                        let r = run_one(argv);
                        if let Ok(mut slot) = results[i].lock() {
                            *slot = Some(r);
                        }
                    }
                });
            }
        });
        results
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| Err("the replay did not run".into()))
            })
            .collect()
    }
}

/// One replay into a temporary folder, removed after.
fn run_one(argv: &[String]) -> Result<String, String> {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("gangway-calibrate-{}-{n}", std::process::id()));
    let mut a = argv.to_vec();
    a.extend(["--out".into(), dir.display().to_string()]);
    let r = crate::json::replay_json(a).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// The targets named by `spec` (for early errors before any replay).
pub fn check_targets(spec: &str) -> Result<Targets, ReplayError> {
    Ok(Targets::named_or_file(spec)?)
}
