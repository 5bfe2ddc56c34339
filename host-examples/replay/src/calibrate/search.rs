//! The calibration itself: the candidates of a seeded Latin-hypercube
//! search, each replayed on every training window at every load (through a
//! caller's evaluator, so the same search runs on threads or on Ray) and
//! scored by a high quantile of those fits, the best one, and its
//! validation on held-out windows.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng, seq::SliceRandom};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub use super::assess::{Assessed, Candidate, Reach, Spread, WindowFit, quantile};
pub use super::evaluate::{Evaluate, Replayed, local_evaluator};
use super::fit::Fit;
use super::knobs::{Knob, Range, Setting, Value};
pub use super::plan::{Plan, Window};
use super::sensitivity::{self, SensitivityReport};
pub use super::spec::{PHILLY_CALIBRATION, Spec};
use super::targets::Targets;
use crate::cli::ReplayError;

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

/// What a calibration found (`calibrate.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    /// What was searched.
    pub spec: Spec,
    /// Which replays.
    pub plan: Plan,
    /// The start, on every window.
    pub start: Assessed,
    /// The best candidate, on every window.
    pub best: Assessed,
    /// The held-out windows not replayed, and why (a window past the
    /// trace's end has no jobs).
    pub holdout_skipped: Vec<Skipped>,
    /// Every candidate, in order.
    pub candidates: Vec<Candidate>,
    /// For each target, how close the settings tried came to it on their
    /// worst training replay (a target none met says by how much the model
    /// misses it).
    pub reach: Vec<Reach>,
    /// The best fit with its time scale and quota factor moved (none when
    /// the specification asks for no sensitivity replays).
    pub sensitivity: Option<SensitivityReport>,
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
        fits: Vec::new(),
    };
    let start = spec.start_setting();
    let total = spec.candidates.max(1);
    let refine = ((total - 1) as f64 * spec.refine_share).round() as usize;
    search.first_stage(spec, &start, total - 1 - refine)?;
    let b = search.best();
    progress(&format!(
        "stage 1: {} candidates x {} replays, best #{b} score {} (start {})",
        search.candidates.len(),
        plan.train.len() * plan.loads.len(),
        score_str(search.candidates[b].score),
        score_str(search.candidates[0].score)
    ));
    search.refine(spec, refine, progress)?;
    let best = search.best();
    let a = search.assess(spec, best)?;
    Ok(Calibration {
        spec: spec.clone(),
        plan: plan.clone(),
        start: a.start,
        best: a.best,
        holdout_skipped: a.holdout_skipped,
        reach: super::assess::reach(&search.fits),
        candidates: search.candidates,
        sensitivity: a.sensitivity,
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
    /// Each candidate's training fits, in the order of its `scores` (empty
    /// for a failed one), kept for the assessment.
    fits: Vec<Vec<Fit>>,
}

impl Search<'_, '_, '_> {
    /// Replays `settings` on every training window at every load as stage
    /// `stage`, adding them to the candidates.
    fn run_stage(&mut self, stage: u8, settings: Vec<Setting>) -> Result<(), ReplayError> {
        let plan = self.plan;
        let argvs: Vec<Vec<String>> = settings
            .iter()
            .flat_map(|s| {
                plan.train.iter().flat_map(move |w| {
                    plan.loads
                        .iter()
                        .map(move |l| plan.argv(w, &plan.at_load(s, *l)))
                })
            })
            .collect();
        let per = plan.train.len() * plan.loads.len();
        let mut results = super::evaluate::replay_all(self.evaluate, &argvs)?.into_iter();
        for setting in settings {
            let replays: Result<Vec<Replayed>, String> = results.by_ref().take(per).collect();
            let index = self.candidates.len();
            let (candidate, fits) = match replays {
                Ok(r) => {
                    let fits: Vec<Fit> = r.into_iter().map(|r| r.fit).collect();
                    let scores: Vec<f64> = fits.iter().map(|f| f.score).collect();
                    let c = Candidate {
                        index,
                        stage,
                        setting,
                        score: quantile(&scores, plan.quantile),
                        scores,
                        met: fits.iter().map(|f| f.met).min().unwrap_or(0),
                        error: None,
                    };
                    (c, fits)
                }
                Err(e) => {
                    let c = Candidate {
                        index,
                        stage,
                        setting,
                        score: None,
                        scores: Vec::new(),
                        met: 0,
                        error: Some(e),
                    };
                    (c, Vec::new())
                }
            };
            self.candidates.push(candidate);
            self.fits.push(fits);
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

    /// The start and candidate `best` on every window: their training fits
    /// from the search, their replays on the held-out windows (a window
    /// whose replay fails, e.g. beyond the trace's end, is skipped and
    /// said), and the best's sensitivity replays, all in one batch.
    fn assess(&mut self, spec: &Spec, best: usize) -> Result<Assessment, ReplayError> {
        let plan = self.plan;
        let settings = [&self.candidates[0].setting, &self.candidates[best].setting];
        let held: Vec<Vec<String>> = settings
            .iter()
            .flat_map(|s| plan.holdout.iter().map(move |w| plan.argv(w, s)))
            .collect();
        let points = sensitivity::points(&spec.sensitivity, plan, settings[1]);
        let mut argvs = held.clone();
        argvs.extend(
            points
                .iter()
                .map(|p| plan.argv(&plan.sensitivity, &p.setting)),
        );
        let mut replays = super::evaluate::replay_all(self.evaluate, &argvs)?.into_iter();
        let mut next = || {
            replays
                .next()
                .unwrap_or_else(|| Err("the evaluator lost a replay".into()))
        };
        let held_fits: Vec<Result<Fit, String>> =
            held.iter().map(|_| next().map(|r| r.fit)).collect();
        let (start_held, best_held, holdout_skipped) = held_windows(plan, held_fits);
        let start = Assessed::of(plan, &self.candidates[0], &self.fits[0], start_held);
        let best = Assessed::of(plan, &self.candidates[best], &self.fits[best], best_held);
        let mut replayed = Vec::new();
        for p in &points {
            let r = next().map_err(|e| {
                let argv = plan.argv(&plan.sensitivity, &p.setting);
                ReplayError::Usage(format!("replay {argv:?} failed: {e}"))
            })?;
            replayed.push(r);
        }
        Ok(Assessment {
            start,
            best,
            sensitivity: sensitivity::report(plan, points, replayed),
            holdout_skipped,
        })
    }
}

/// The start's and the best's fits on every window, the sensitivity
/// report, and the held-out windows not replayed.
struct Assessment {
    start: Assessed,
    best: Assessed,
    sensitivity: Option<SensitivityReport>,
    holdout_skipped: Vec<Skipped>,
}

/// A held-out window left out of the assessment: its replay failed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    /// The window's name.
    pub window: String,
    /// Its arguments (`--skip A --jobs N`).
    pub args: Vec<String>,
    /// Why its replay failed (`the workload has no jobs` past the trace's end).
    pub reason: String,
}

/// A setting's fits on the held-out windows replayed.
type HeldFits<'p> = Vec<(&'p Window, Fit)>;

/// Splits the held-out replays (`fits`: the start's on each window, then
/// the best's) into the start's and the best's fits on the windows both
/// replayed, and the windows skipped.
fn held_windows(
    plan: &Plan,
    fits: Vec<Result<Fit, String>>,
) -> (HeldFits<'_>, HeldFits<'_>, Vec<Skipped>) {
    let n = plan.holdout.len();
    let mut fits = fits.into_iter();
    let start: Vec<Result<Fit, String>> = fits.by_ref().take(n).collect();
    let best: Vec<Result<Fit, String>> = fits.take(n).collect();
    let (mut s_out, mut b_out, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for ((w, s), b) in plan.holdout.iter().zip(start).zip(best) {
        match (s, b) {
            (Ok(s), Ok(b)) => {
                s_out.push((w, s));
                b_out.push((w, b));
            }
            (Err(e), _) | (_, Err(e)) => skipped.push(Skipped {
                window: w.name.clone(),
                args: w.args.clone(),
                reason: e,
            }),
        }
    }
    (s_out, b_out, skipped)
}

fn score_str(s: Option<f64>) -> String {
    s.map_or("failed".into(), |s| format!("{s:.3}"))
}

/// The targets named by `spec` (for early errors before any replay).
pub fn check_targets(spec: &str) -> Result<Targets, ReplayError> {
    Ok(Targets::named_or_file(spec)?)
}
