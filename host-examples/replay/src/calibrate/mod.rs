//! `replay calibrate`: fits the model's knobs to observed targets by a
//! seeded search over candidate settings, each replayed on several windows
//! of a trace at several loads, validates the best on held-out windows and
//! reports how its figures move with the time scale and the quota factor.
//!
//! - [`targets`]: what to match (the study's figures are built in);
//! - [`fit`]: how one replay matches them (`replay --fit`), recorded as a
//!   [`fit_record::Fit`];
//! - [`knobs`]: the model's knobs and the arguments that set them;
//! - [`spec`]: what a calibration searches (knobs, windows, loads,
//!   sensitivity), and [`plan`]: the replays that follow from it;
//! - [`search`]: the candidates and the best; [`assess`]: a setting on
//!   every window, and the tables; [`evaluate`]: running replays;
//! - [`sensitivity`] and [`sensitivity_plot`]: the best fit with one knob
//!   moved, as a table and an SVG;
//! - [`command`]: `replay calibrate`;
//! - [`observed`] and [`targets_command`]: `replay targets`, targets
//!   measured in a cluster's own job log.
//!
//! The search is a Latin hypercube over the knobs' ranges (every knob's
//! range cut into as many strata as candidates, each stratum used once),
//! then refining Latin hypercubes in boxes around the best so far, each
//! half as wide as the last. A candidate's score is a high quantile (by
//! default the worst) of its scores on the training windows at each load,
//! so the best fit holds wherever a replay starts and a few percent either
//! side of its load. It suits a handful of knobs and replays that take
//! seconds: the replays of a stage are independent, so they run at once
//! (threads in process, or Ray tasks from Python), and it needs no model
//! of the score, which is noisy in the knobs (a replay is a discrete
//! simulation). Candidate 0 is the starting point, so the best fit is
//! never worse than the start. Everything is seeded: the same inputs give
//! the same search and the same report.

pub mod assess;
pub mod command;
pub mod evaluate;
pub mod fit;
pub mod fit_record;
pub mod knobs;
pub mod observed;
pub mod plan;
pub mod search;
pub mod sensitivity;
pub mod sensitivity_plot;
pub mod spec;
pub mod tables;
pub mod targets;
pub mod targets_command;

/// Lays out rows of cells as an aligned text table (first column left,
/// the rest right-aligned).
pub(crate) fn text_table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        for (c, cell) in r.iter().enumerate() {
            let w = widths[c];
            if c == 0 {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.push('\n');
    }
    out
}
