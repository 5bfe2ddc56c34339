//! The calibration's console tables: every window's score for the start
//! and the best, their fits, the knobs and the sensitivity report.

use super::assess::{Assessed, WindowFit, unreached_table};
use super::fit::{Fit, fmt};
use super::knobs::{Knob, Range};
use super::search::Calibration;

/// A figure with `*` where met, `n/a` where missing.
fn cell(fit: &Fit, i: usize) -> String {
    fit.detail.get(i).map_or("n/a".into(), |it| match it.model {
        Some(m) => format!("{}{}", if it.met { "*" } else { "" }, fmt(m)),
        None => "n/a".into(),
    })
}

impl Calibration {
    /// The console's tables: every window's score for the start and the
    /// best, the fit of each on every window at load 1, the knobs, and the
    /// sensitivity report.
    pub fn table(&self) -> String {
        let mut out = self.scores_table();
        for (title, a) in [("start", &self.start), ("best", &self.best)] {
            out.push('\n');
            out.push_str(&fit_table(title, a));
        }
        out.push('\n');
        out.push_str(&self.knobs_table());
        out.push('\n');
        out.push_str(&unreached_table(&self.reach, self.candidates.len()));
        if let Some(s) = &self.sensitivity {
            out.push('\n');
            out.push_str(&s.table());
        }
        out
    }

    /// A row per replay (training windows at each load, held-out windows):
    /// its jobs and the start's and the best's score and targets met.
    fn scores_table(&self) -> String {
        let mut rows = vec![vec![
            "window".to_string(),
            "load".into(),
            "replay".into(),
            "start: score; met".into(),
            "best: score; met".into(),
        ]];
        let both = |s: &[WindowFit], b: &[WindowFit], held: bool, rows: &mut Vec<Vec<String>>| {
            for (s, b) in s.iter().zip(b) {
                let name = if held {
                    format!("{} (held out)", s.window)
                } else {
                    s.window.clone()
                };
                let window_args = b.args.iter().take(4).cloned().collect::<Vec<_>>();
                rows.push(vec![
                    name,
                    format!("{}", b.load),
                    window_args.join(" "),
                    format!("{:.3}; {}/{}", s.fit.score, s.fit.met, s.fit.items),
                    format!("{:.3}; {}/{}", b.fit.score, b.fit.met, b.fit.items),
                ]);
            }
        };
        both(&self.start.train, &self.best.train, false, &mut rows);
        both(&self.start.holdout, &self.best.holdout, true, &mut rows);
        for s in &self.holdout_skipped {
            rows.push(vec![
                format!("{} (held out)", s.window),
                String::new(),
                s.args.join(" "),
                format!("not replayed: {}", s.reason),
                String::new(),
            ]);
        }
        let summary = |a: &Assessed| format!("{:.3}", a.score);
        let spread = |a: &Assessed| {
            format!(
                "{:.3} / {:.3} / {:.3}",
                a.spread.best, a.spread.median, a.spread.worst
            )
        };
        let quantile = if self.plan.quantile == 1.0 {
            "worst".to_string()
        } else {
            format!("q{}", self.plan.quantile)
        };
        rows.push(vec![
            format!("searched ({quantile} training)"),
            String::new(),
            String::new(),
            summary(&self.start),
            summary(&self.best),
        ]);
        rows.push(vec![
            "training spread (best / median / worst)".into(),
            String::new(),
            String::new(),
            spread(&self.start),
            spread(&self.best),
        ]);
        super::text_table(&rows)
    }

    /// A row per knob: its range, the start's value and the best's.
    fn knobs_table(&self) -> String {
        let mut rows = vec![vec![
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
            rows.push(vec![k.as_str().into(), range, s.to_string(), b.to_string()]);
        }
        super::text_table(&rows)
    }
}

/// `a`'s fit on every window at load 1: a row per target, a column per
/// window, `*` where met.
fn fit_table(title: &str, a: &Assessed) -> String {
    let columns = a.at_load_one();
    let Some((_, first)) = columns.first() else {
        return String::new();
    };
    let mut head = vec![
        format!("{title} ({})", first.fit.targets),
        "observed".into(),
    ];
    head.extend(columns.iter().map(|(n, _)| n.clone()));
    let mut rows = vec![head];
    for (i, it) in first.fit.detail.iter().enumerate() {
        let mut r = vec![it.name.clone(), fmt(it.observed)];
        r.extend(columns.iter().map(|(_, w)| cell(&w.fit, i)));
        rows.push(r);
    }
    let mut r = vec!["score; met (* = met)".into(), String::new()];
    r.extend(
        columns
            .iter()
            .map(|(_, w)| format!("{:.3}; {}/{}", w.fit.score, w.fit.met, w.fit.items)),
    );
    rows.push(r);
    super::text_table(&rows)
}
