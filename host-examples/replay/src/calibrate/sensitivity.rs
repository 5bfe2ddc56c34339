//! Where the cliff is: the best fit replayed with its time scale and its
//! quota factor moved one at a time, so a user sees how close to
//! saturation the model runs and which knob moves which figure (waits per
//! size bucket, Table 2's shares, GPUs allocated).

use serde::Serialize;

use super::evaluate::Replayed;
use super::fit::{Fit, fmt};
use super::knobs::{Knob, Setting, Value};
use super::plan::Plan;
use super::spec::Sensitivity;

/// A sensitivity replay to run: `knob` at `factor` times the best's value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    knob: Knob,
    factor: f64,
    value: f64,
    /// The best setting with the knob moved.
    pub(crate) setting: Setting,
}

/// The sensitivity replays of `spec` around `best`: its time scale times
/// each factor, then its quota factor times each (none for `--quotas none`).
pub(crate) fn points(spec: &Sensitivity, plan: &Plan, best: &Setting) -> Vec<Point> {
    let number = |k: Knob, default: f64| match best.get(&k) {
        Some(Value::Number(x)) => *x,
        _ => default,
    };
    let quotas = best
        .get(&Knob::QuotaModel)
        .is_none_or(|m| m.to_string() != "none");
    let time_scale = number(Knob::TimeScale, plan.default_time_scale);
    let quota = number(Knob::QuotaFactor, 1.0);
    let moves = spec
        .time_scale
        .iter()
        .map(|f| (Knob::TimeScale, *f, time_scale))
        .chain(
            spec.quota_factor
                .iter()
                .filter(|_| quotas)
                .map(|f| (Knob::QuotaFactor, *f, quota)),
        );
    moves
        .map(|(knob, factor, base)| {
            let value = knob.snap(base * factor);
            let mut setting = best.clone();
            setting.insert(knob, Value::Number(value));
            Point {
                knob,
                factor,
                value,
                setting,
            }
        })
        .collect()
}

/// The sensitivity report (`calibrate.json`'s `sensitivity`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SensitivityReport {
    /// The window replayed (its name).
    pub window: String,
    /// Its arguments (`--skip A --jobs N`).
    pub window_args: Vec<String>,
    /// Each replay, the time scale's first, each knob's in increasing factor.
    pub points: Vec<SensitivityPoint>,
}

/// The best fit with one knob moved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SensitivityPoint {
    /// The knob moved: `time_scale` or `quota_factor`.
    pub knob: Knob,
    /// Its value over the best fit's.
    pub factor: f64,
    /// Its value.
    pub value: f64,
    /// What a user adds to the plan's base arguments to run this replay.
    pub args: Vec<String>,
    /// The mean share of the cluster's GPUs allocated.
    pub gpu_allocation_mean: f64,
    /// Its fit (every figure the targets compare).
    pub fit: Fit,
}

/// The report of `points`, replayed as `replayed` (in the same order), on
/// the plan's sensitivity window; `None` when there are no points.
pub(crate) fn report(
    plan: &Plan,
    points: Vec<Point>,
    replayed: Vec<Replayed>,
) -> Option<SensitivityReport> {
    if points.is_empty() {
        return None;
    }
    let mut out: Vec<SensitivityPoint> = points
        .into_iter()
        .zip(replayed)
        .map(|(p, r)| SensitivityPoint {
            knob: p.knob,
            factor: p.factor,
            value: p.value,
            args: plan.replay_args(&plan.sensitivity, &p.setting),
            gpu_allocation_mean: r.gpu_allocation_mean,
            fit: r.fit,
        })
        .collect();
    out.sort_by(|a, b| a.knob.cmp(&b.knob).then(a.factor.total_cmp(&b.factor)));
    Some(SensitivityReport {
        window: plan.sensitivity.name.clone(),
        window_args: plan.sensitivity.args.clone(),
        points: out,
    })
}

/// The short column name of a fit item the sensitivity report shows
/// (medians and p90s of waits, Table 2 shares), or `None`.
///
/// ```
/// use gangway_replay::calibrate::sensitivity::shown;
/// assert_eq!(shown("first wait 5-8 p90 (min)").as_deref(), Some("5-8 p90"));
/// assert_eq!(shown("table2 >8 fragmentation (% of events)").as_deref(), Some("T2 >8"));
/// assert_eq!(shown("first wait 4 p99 (min)"), None);
/// ```
pub fn shown(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("first wait ")
        && let Some(w) = rest.strip_suffix(" (min)")
        && (w.ends_with(" p50") || w.ends_with(" p90"))
    {
        return Some(w.to_string());
    }
    let bucket = name
        .strip_prefix("table2 ")?
        .strip_suffix(" fragmentation (% of events)")?;
    Some(format!("T2 {bucket}"))
}

impl SensitivityReport {
    /// The console table: a row per replay, the knob's value, GPUs
    /// allocated, waits (minutes) and Table 2 shares (%), score and met.
    pub fn table(&self) -> String {
        let Some(first) = self.points.first() else {
            return String::new();
        };
        let items: Vec<(usize, String)> = first
            .fit
            .detail
            .iter()
            .enumerate()
            .filter_map(|(i, it)| shown(&it.name).map(|s| (i, s)))
            .collect();
        let mut head = vec![
            format!(
                "sensitivity on {} ({})",
                self.window,
                self.window_args.join(" ")
            ),
            "factor".into(),
            "GPUs alloc. %".into(),
        ];
        head.extend(items.iter().map(|(_, s)| s.clone()));
        head.push("score; met".into());
        let mut rows = vec![head];
        for p in &self.points {
            let mut r = vec![
                format!("{} {}", p.knob.as_str(), p.value),
                format!("{}", p.factor),
                format!("{:.1}", p.gpu_allocation_mean * 100.0),
            ];
            for (i, _) in &items {
                r.push(p.fit.detail.get(*i).map_or("n/a".into(), |it| {
                    let star = if it.met { "*" } else { "" };
                    it.model
                        .map_or("n/a".into(), |m| format!("{star}{}", fmt(m)))
                }));
            }
            r.push(format!("{:.3}; {}/{}", p.fit.score, p.fit.met, p.fit.items));
            rows.push(r);
        }
        let mut out = super::text_table(&rows);
        out.push_str(&self.steepest());
        out
    }

    /// One line per knob: the step between neighbouring values over which
    /// a wait figure moves most (the cliff), and by what factor.
    fn steepest(&self) -> String {
        let mut out = String::new();
        for knob in [Knob::TimeScale, Knob::QuotaFactor] {
            let pts: Vec<&SensitivityPoint> =
                self.points.iter().filter(|p| p.knob == knob).collect();
            let mut steep: Option<(f64, String, f64, f64)> = None;
            for pair in pts.windows(2) {
                for (a, b) in pair[0].fit.detail.iter().zip(&pair[1].fit.detail) {
                    let (Some(x), Some(y), Some(_)) = (a.model, b.model, shown(&a.name)) else {
                        continue;
                    };
                    if a.name.starts_with("table2") || x <= 0.0 || y <= 0.0 {
                        continue;
                    }
                    let ratio = (y / x).max(x / y);
                    if steep.as_ref().is_none_or(|s| ratio > s.0) {
                        steep = Some((ratio, a.name.clone(), pair[0].value, pair[1].value));
                    }
                }
            }
            if let Some((ratio, name, from, to)) = steep {
                out.push_str(&format!(
                    "steepest step of {}: {from} -> {to} moves {name} {ratio:.1}x\n",
                    knob.as_str()
                ));
            }
        }
        out
    }
}
