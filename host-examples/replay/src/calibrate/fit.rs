//! How well a replay matches observed [`Targets`]: each target's observed
//! and modelled value, a normalized error (at most 1 when the target is
//! met) and one score over all of them.

pub use super::fit_record::{Fit, FitItem};
use super::targets::{FirstWait, GpuTimeByStatus, OneServer, Table2Share, Targets, Tolerance};
use crate::report::Run;
use crate::sim::{JobOutcome, RunResult};
use crate::trace::{Outcome, Trace, TraceJob};

/// The error a missing model value counts as.
const MISSING: f64 = 3.0;

fn item(name: String, observed: f64, model: Option<f64>, error: Option<f64>) -> FitItem {
    let error = error.filter(|e| e.is_finite()).unwrap_or(MISSING);
    FitItem {
        name,
        observed,
        model: model.map(round4),
        error: round4(error),
        met: error <= 1.0,
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[u64], p: u8) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (f64::from(p) / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Compares one replay (`result` of `trace`, rounds every
/// `round_interval_s`) with `targets`, and summarizes it as `run` did.
pub fn fit(
    targets: &Targets,
    trace: &Trace,
    result: &RunResult,
    run: &Run,
    round_interval_s: u64,
) -> Fit {
    let tol = &targets.tolerance;
    let mut detail = Vec::new();
    for w in &targets.first_wait {
        let waits = first_waits(own(result, trace), w);
        detail.extend(first_wait_items(w, &waits, tol));
        detail.push(largest_bin_item(w, &waits, tol, round_interval_s));
    }
    for t in &targets.table2 {
        detail.push(table2_item(t, run, tol));
    }
    for o in &targets.one_server {
        detail.push(one_server_item(o, own(result, trace), tol));
    }
    let has_statuses = own(result, trace).any(|(_, tj)| {
        tj.attempts
            .last()
            .is_some_and(|a| a.outcome != Outcome::Passed)
    });
    if let (Some(g), true) = (&targets.gpu_time_by_status, has_statuses) {
        detail.extend(gpu_time_items(g, run, tol));
    }
    let score = if detail.is_empty() {
        0.0
    } else {
        detail.iter().map(|i| i.error * i.error).sum::<f64>() / detail.len() as f64
    };
    Fit {
        targets: targets.name.clone(),
        score: round4(score),
        met: detail.iter().filter(|i| i.met).count(),
        items: detail.len(),
        detail,
    }
}

/// The replay's own jobs (past the warm ones) with their trace jobs.
fn own<'a>(
    result: &'a RunResult,
    trace: &'a Trace,
) -> impl Iterator<Item = (&'a JobOutcome, &'a TraceJob)> {
    result.jobs.iter().zip(&trace.jobs).skip(result.warm)
}

/// The first waits, sorted, of the jobs in `w`'s group that started.
fn first_waits<'a>(
    own: impl Iterator<Item = (&'a JobOutcome, &'a TraceJob)>,
    w: &FirstWait,
) -> Vec<u64> {
    let mut waits: Vec<u64> = own
        .filter(|(j, tj)| (w.gpus[0]..=w.gpus[1]).contains(&j.gpus) && tj.run_s() >= w.min_run_s)
        .filter_map(|(j, _)| j.first_start_s.map(|s| s.saturating_sub(j.submit_s)))
        .collect();
    waits.sort_unstable();
    waits
}

/// `w`'s quantiles against the group's sorted `waits`.
fn first_wait_items<'a>(
    w: &'a FirstWait,
    waits: &'a [u64],
    tol: &'a Tolerance,
) -> impl Iterator<Item = FitItem> + 'a {
    w.quantiles().into_iter().map(move |(p, observed)| {
        let factor = if p >= 99 {
            tol.wait_factor_p99
        } else {
            tol.wait_factor
        };
        // A wait under a second counts as one: ratios need a floor.
        let model = percentile(waits, p).map(|s| s.max(1) as f64 / 60.0);
        let error = model.map(|m| (m / observed).ln().abs() / factor.ln());
        item(
            format!("first wait {} p{p} (min)", w.name),
            observed,
            model,
            error,
        )
    })
}

/// The largest share of `w`'s group's jobs whose sorted `waits` fall in one
/// round interval, after the first (jobs started at once).
fn largest_bin_item(
    w: &FirstWait,
    waits: &[u64],
    tol: &Tolerance,
    round_interval_s: u64,
) -> FitItem {
    let bin = round_interval_s.max(1);
    let mut largest = 0usize;
    let mut i = 0;
    while i < waits.len() {
        let b = waits[i] / bin;
        let n = waits[i..].iter().take_while(|x| *x / bin == b).count();
        if b > 0 {
            largest = largest.max(n);
        }
        i += n;
    }
    let share = (!waits.is_empty()).then(|| largest as f64 / waits.len() as f64 * 100.0);
    item(
        format!("first wait {} largest {bin}-s bin (%)", w.name),
        tol.single_wait_percent,
        share,
        share.map(|s| s / tol.single_wait_percent),
    )
}

/// Table 2's fragmentation share of `t`'s bucket.
fn table2_item(t: &Table2Share, run: &Run, tol: &Tolerance) -> FitItem {
    let model = run
        .by_size
        .get(&t.bucket)
        .and_then(|b| b.fragmentation_share())
        .map(|s| s * 100.0);
    item(
        format!("table2 {} fragmentation (% of events)", t.bucket),
        t.fragmentation_share,
        model,
        model.map(|m| (m - t.fragmentation_share).abs() / tol.share_points),
    )
}

/// The share of `o`'s gangs whose first attempt ran on one server.
fn one_server_item<'a>(
    o: &OneServer,
    own: impl Iterator<Item = (&'a JobOutcome, &'a TraceJob)>,
    tol: &Tolerance,
) -> FitItem {
    let spans: Vec<u32> = own
        .filter(|(j, _)| (o.gpus[0]..=o.gpus[1]).contains(&j.gpus))
        .filter_map(|(j, _)| j.first_servers)
        .collect();
    let model = (!spans.is_empty())
        .then(|| spans.iter().filter(|s| **s == 1).count() as f64 / spans.len() as f64 * 100.0);
    item(
        format!("one server {}-{} GPUs (%)", o.gpus[0], o.gpus[1]),
        o.share,
        model,
        model.map(|m| (m - o.share).abs() / tol.share_points),
    )
}

/// The shares of GPU time by final status.
fn gpu_time_items(g: &GpuTimeByStatus, run: &Run, tol: &Tolerance) -> Vec<FitItem> {
    let total: u64 = run.gpu_s_by_status.values().sum();
    [
        ("passed", g.passed),
        ("killed", g.killed),
        ("failed", g.failed),
    ]
    .into_iter()
    .map(|(status, observed)| {
        let model = (total > 0).then(|| {
            run.gpu_s_by_status.get(status).copied().unwrap_or(0) as f64 / total as f64 * 100.0
        });
        item(
            format!("GPU time {status} (%)"),
            observed,
            model,
            model.map(|m| (m - observed).abs() / tol.share_points),
        )
    })
    .collect()
}

/// The fit of each run as a console table: a row per item, a column per
/// run (`model (error)`), `*` where met.
pub fn table(runs: &[Run]) -> String {
    let fits: Vec<(&str, &Fit)> = runs
        .iter()
        .filter_map(|r| r.fit.as_ref().map(|f| (r.name.as_str(), f)))
        .collect();
    let Some((_, first)) = fits.first() else {
        return String::new();
    };
    let mut rows: Vec<Vec<String>> = vec![{
        let mut h = vec![format!("fit to {}", first.targets), "observed".into()];
        h.extend(fits.iter().map(|(n, _)| n.to_string()));
        h
    }];
    for (i, it) in first.detail.iter().enumerate() {
        let mut row = vec![it.name.clone(), fmt(it.observed)];
        for (_, f) in &fits {
            row.push(f.detail.get(i).map_or(String::new(), cell));
        }
        rows.push(row);
    }
    let mut last = vec!["score (mean squared error; met)".into(), String::new()];
    last.extend(
        fits.iter()
            .map(|(_, f)| format!("{:.3}; {}/{}", f.score, f.met, f.items)),
    );
    rows.push(last);
    crate::calibrate::text_table(&rows)
}

fn cell(i: &FitItem) -> String {
    match i.model {
        Some(m) => format!(
            "{}{} ({:.2})",
            if i.met { "*" } else { "" },
            fmt(m),
            i.error
        ),
        None => "n/a".into(),
    }
}

/// A figure with 3 significant digits.
pub(crate) fn fmt(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}
