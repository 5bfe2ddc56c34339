//! A setting's fit on every window of a calibration (training windows at
//! each load, held-out windows), the spread of its scores, the candidates
//! tried and the targets no candidate reached (the console's tables are in
//! `tables.rs`).

use serde::Serialize;

use super::fit::{Fit, fmt};
use super::knobs::{self, Setting};
use super::plan::{Plan, Window};

/// A setting's fit on one window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowFit {
    /// The window's name (`whole`, `0..0.5`, ...).
    pub window: String,
    /// The factor on the setting's time scale.
    pub load: f64,
    /// What a user adds to the plan's base arguments to run this replay:
    /// the window's and the knobs' arguments.
    pub args: Vec<String>,
    /// Its fit.
    pub fit: Fit,
}

/// How a setting's training scores spread.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// The lowest (the best window).
    pub best: f64,
    /// The median.
    pub median: f64,
    /// The highest (the worst window).
    pub worst: f64,
}

impl Spread {
    /// The spread of `scores` (`NaN`s when there are none).
    fn of(scores: &[f64]) -> Spread {
        let q = |p: f64| quantile(scores, p).unwrap_or(f64::NAN);
        Spread {
            best: scores.iter().copied().fold(f64::NAN, f64::min),
            median: q(0.5),
            worst: q(1.0),
        }
    }
}

/// A setting's fit on every window of a calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Assessed {
    /// Its knobs.
    pub setting: knobs::Setting,
    /// The replay arguments that set them (add a window's).
    pub args: Vec<String>,
    /// The score the search minimised (the plan's quantile of its training
    /// scores).
    pub score: f64,
    /// How its training scores spread.
    pub spread: Spread,
    /// Its fit on each training window at each load.
    pub train: Vec<WindowFit>,
    /// Its fit on each held-out window, at load 1.
    pub holdout: Vec<WindowFit>,
}

impl Assessed {
    /// `candidate` with its training `fits` (in the order of its scores)
    /// and its fit on each held-out window replayed.
    pub(crate) fn of(
        plan: &Plan,
        candidate: &Candidate,
        fits: &[Fit],
        held: Vec<(&Window, Fit)>,
    ) -> Assessed {
        let setting = &candidate.setting;
        let replays = plan
            .train
            .iter()
            .flat_map(|w| plan.loads.iter().map(move |l| (w, *l)));
        let train: Vec<WindowFit> = replays
            .zip(fits)
            .map(|((w, load), fit)| WindowFit {
                window: w.name.clone(),
                load,
                args: plan.replay_args(w, &plan.at_load(setting, load)),
                fit: fit.clone(),
            })
            .collect();
        let holdout: Vec<WindowFit> = held
            .into_iter()
            .map(|(w, fit)| WindowFit {
                window: w.name.clone(),
                load: 1.0,
                args: plan.replay_args(w, setting),
                fit,
            })
            .collect();
        let scores: Vec<f64> = train.iter().map(|w| w.fit.score).collect();
        Assessed {
            setting: setting.clone(),
            args: knobs::args_of(setting),
            score: candidate.score.unwrap_or(f64::NAN),
            spread: Spread::of(&scores),
            train,
            holdout,
        }
    }

    /// Its fits at load 1, training windows first: (column name, fit).
    pub fn at_load_one(&self) -> Vec<(String, &WindowFit)> {
        let train = self.train.iter().filter(|w| w.load == 1.0);
        let held = self.holdout.iter();
        train
            .map(|w| (w.window.clone(), w))
            .chain(held.map(|w| (format!("{} held-out", w.window), w)))
            .collect()
    }
}

/// How close the settings tried came to one target: the lowest error any
/// candidate reached on its worst training replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reach {
    /// The target (a fit item's name).
    pub target: String,
    /// Its observed value.
    pub observed: f64,
    /// The candidate that came closest on its worst training replay.
    pub candidate: usize,
    /// Its value there (`null` when missing).
    pub model: Option<f64>,
    /// Its normalized error there (at most 1: met on every training replay).
    pub error: f64,
    /// Whether some candidate met it on every training window at every load.
    pub met: bool,
}

/// For each target, the candidate whose worst training replay comes
/// closest to it; `fits[c]` are candidate `c`'s training fits (empty when
/// it failed).
pub(crate) fn reach(fits: &[Vec<Fit>]) -> Vec<Reach> {
    let Some(first) = fits.iter().find_map(|f| f.first()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in first.detail.iter().enumerate() {
        let worst = |c: &Vec<Fit>| {
            c.iter()
                .filter_map(|f| f.detail.get(i))
                .max_by(|a, b| a.error.total_cmp(&b.error))
                .cloned()
        };
        let closest = fits
            .iter()
            .enumerate()
            .filter_map(|(c, f)| worst(f).map(|w| (c, w)))
            .min_by(|a, b| a.1.error.total_cmp(&b.1.error).then(a.0.cmp(&b.0)));
        if let Some((candidate, w)) = closest {
            out.push(Reach {
                target: item.name.clone(),
                observed: item.observed,
                candidate,
                model: w.model,
                error: w.error,
                met: w.error <= 1.0,
            });
        }
    }
    out
}

/// How far `model` is from `observed` for the target `name`: a factor for
/// waits (`3.3x long`), points for shares (`26 points low`).
fn by_how_much(name: &str, observed: f64, model: Option<f64>) -> String {
    let Some(m) = model else {
        return "no value".into();
    };
    if name.ends_with("(min)") {
        if m >= observed {
            format!("{}x long", fmt(m / observed))
        } else {
            format!("{}x short", fmt(observed / m.max(1e-9)))
        }
    } else {
        let d = m - observed;
        format!(
            "{} points {}",
            fmt(d.abs()),
            if d >= 0.0 { "high" } else { "low" }
        )
    }
}

/// The targets no setting tried met on every training replay: a row each
/// with the closest value and by how much it misses.
pub(crate) fn unreached_table(reach: &[Reach], candidates: usize) -> String {
    let missed: Vec<&Reach> = reach.iter().filter(|r| !r.met).collect();
    if missed.is_empty() {
        return format!(
            "some setting of the {candidates} tried met every target on every training replay\n"
        );
    }
    let mut rows = vec![vec![
        format!("not met on every training replay by any of the {candidates} settings tried"),
        "observed".into(),
        "closest (its worst replay)".into(),
        "by".into(),
        "candidate".into(),
    ]];
    for r in missed {
        rows.push(vec![
            r.target.clone(),
            fmt(r.observed),
            r.model.map_or("n/a".into(), fmt),
            by_how_much(&r.target, r.observed, r.model),
            format!("#{}", r.candidate),
        ]);
    }
    super::text_table(&rows)
}

/// One candidate tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    /// Its index (0: the start).
    pub index: usize,
    /// 0: the start, 1: the first hypercube, 2...: the refining ones.
    pub stage: u8,
    /// Its knobs.
    pub setting: Setting,
    /// The score the search minimises: the plan's quantile of `scores`
    /// (lower is better; `null` if a replay failed).
    pub score: Option<f64>,
    /// Its score on each training window at each load (window by window,
    /// the loads of a window in order).
    pub scores: Vec<f64>,
    /// Targets met on its worst training replay (the fewest).
    pub met: usize,
    /// Why a replay of it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The nearest-rank quantile `q` (in (0, 1]) of `scores`.
///
/// ```
/// use gangway_replay::calibrate::search::quantile;
/// assert_eq!(quantile(&[3.0, 1.0, 2.0, 9.0], 1.0), Some(9.0));
/// assert_eq!(quantile(&[3.0, 1.0, 2.0, 9.0], 0.5), Some(2.0));
/// assert_eq!(quantile(&[], 0.9), None);
/// ```
pub fn quantile(scores: &[f64], q: f64) -> Option<f64> {
    let mut s = scores.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (q * s.len() as f64).ceil() as usize;
    s.get(rank.clamp(1, s.len().max(1)) - 1).copied()
}
