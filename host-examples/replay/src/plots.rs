//! SVG plots of a replay: queueing-delay CDF per size bucket, fair-share vs
//! fragmentation delay per bucket, GPUs allocated over time, and per-VC share
//! of GPUs over time.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{BUCKETS, Run, bucket_name};
use crate::sim::RunResult;

/// A plot that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("{file}: cannot draw plot: {message}")]
pub struct PlotError {
    /// The SVG file.
    pub file: String,
    /// What went wrong.
    pub message: String,
}

pub(crate) fn err(file: &Path, e: impl std::fmt::Display) -> PlotError {
    PlotError {
        file: file.display().to_string(),
        message: e.to_string(),
    }
}

pub(crate) const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// An 800 x 500 white SVG canvas writing to `file`.
fn canvas(file: &Path) -> Result<DrawingArea<SVGBackend<'_>, Shift>, PlotError> {
    let root = SVGBackend::new(file, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(file, e))?;
    Ok(root)
}

/// Draws the series labels in a framed box.
pub(crate) fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    file: &Path,
) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(file, e))
}

/// Writes the four plots of one run into `dir`, prefixed with the run's name;
/// returns the files written.
pub fn write_all(dir: &Path, run: &Run, result: &RunResult) -> Result<Vec<PathBuf>, PlotError> {
    let prefix = run
        .name
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    let files = [
        dir.join(format!("{prefix}-queue-delay-cdf.svg")),
        dir.join(format!("{prefix}-delay-kinds.svg")),
        dir.join(format!("{prefix}-gpus-allocated.svg")),
        dir.join(format!("{prefix}-vc-share.svg")),
    ];
    queue_cdf(&files[0], run, result)?;
    delay_kinds(&files[1], run)?;
    allocated(&files[2], run, result)?;
    vc_share(&files[3], run, result)?;
    Ok(files.to_vec())
}

fn queue_cdf(file: &Path, run: &Run, result: &RunResult) -> Result<(), PlotError> {
    let root = canvas(file)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Queueing delay CDF by job size ({})", run.name),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((0.01f64..10_000.0).log_scale(), 0.0f64..1.0)
        .map_err(|e| err(file, e))?;
    chart
        .configure_mesh()
        .x_desc("queueing delay (minutes, log)")
        .y_desc("CDF")
        .draw()
        .map_err(|e| err(file, e))?;
    for (i, b) in BUCKETS.iter().enumerate() {
        let mut d: Vec<f64> = result
            .jobs
            .iter()
            .filter(|j| bucket_name(j.gpus) == *b)
            .filter_map(|j| {
                j.first_start_s
                    .map(|s| (s.saturating_sub(j.submit_s) as f64 / 60.0).max(0.01))
            })
            .collect();
        if d.is_empty() {
            continue;
        }
        d.sort_by(f64::total_cmp);
        let n = d.len() as f64;
        let step = (d.len() / 400).max(1);
        let points: Vec<(f64, f64)> = d
            .iter()
            .enumerate()
            .filter(|(k, _)| k % step == 0 || *k + 1 == d.len())
            .map(|(k, v)| (*v, (k + 1) as f64 / n))
            .collect();
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(file, e))?
            .label(format!("{b} GPU"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    legend(&mut chart, file)?;
    root.present().map_err(|e| err(file, e))
}

fn delay_kinds(file: &Path, run: &Run) -> Result<(), PlotError> {
    let hours = |s: u64| s as f64 / 3600.0;
    let max = BUCKETS
        .iter()
        .map(|b| {
            let x = &run.by_size[*b];
            hours(x.fair_share_delay_s.max(x.fragmentation_delay_s))
        })
        .fold(1.0, f64::max);
    let root = canvas(file)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Fair-share vs fragmentation delay ({})", run.name),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0f64..4.0, 0.0f64..max * 1.1)
        .map_err(|e| err(file, e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("delay (hours, summed over jobs)")
        .draw()
        .map_err(|e| err(file, e))?;
    let label_style = ("sans-serif", 14).into_font().color(&BLACK);
    chart
        .draw_series(BUCKETS.iter().enumerate().map(|(i, b)| {
            Text::new(
                format!("{b} GPU"),
                (i as f64 + 0.35, max * 1.05),
                label_style.clone(),
            )
        }))
        .map_err(|e| err(file, e))?;
    for (k, (label, color)) in [("fair-share", COLORS[0]), ("fragmentation", COLORS[1])]
        .into_iter()
        .enumerate()
    {
        let bars = BUCKETS.iter().enumerate().map(|(i, b)| {
            let x = &run.by_size[*b];
            let v = hours(if k == 0 {
                x.fair_share_delay_s
            } else {
                x.fragmentation_delay_s
            });
            let left = i as f64 + 0.1 + 0.4 * k as f64;
            Rectangle::new([(left, 0.0), (left + 0.38, v)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| err(file, e))?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    legend(&mut chart, file)?;
    root.present().map_err(|e| err(file, e))
}

fn allocated(file: &Path, run: &Run, result: &RunResult) -> Result<(), PlotError> {
    let days = |t: u64| t as f64 / 86_400.0;
    let end = result.samples.last().map_or(1.0, |s| days(s.t_s)).max(0.01);
    let max = result
        .samples
        .iter()
        .map(|s| s.allocated.max(s.online))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let root = canvas(file)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("GPUs allocated over time ({})", run.name),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0f64..end, 0.0f64..max * 1.1)
        .map_err(|e| err(file, e))?;
    chart
        .configure_mesh()
        .x_desc("days")
        .y_desc("GPUs allocated")
        .draw()
        .map_err(|e| err(file, e))?;
    for (k, label) in ["allocated", "capacity (GPUs online)"]
        .into_iter()
        .enumerate()
    {
        let color = COLORS[k];
        chart
            .draw_series(LineSeries::new(
                result.samples.iter().map(|s| {
                    let v = if k == 0 { s.allocated } else { s.online };
                    (days(s.t_s), f64::from(v))
                }),
                color.stroke_width(2),
            ))
            .map_err(|e| err(file, e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    legend(&mut chart, file)?;
    root.present().map_err(|e| err(file, e))
}

fn vc_share(file: &Path, run: &Run, result: &RunResult) -> Result<(), PlotError> {
    let days = |t: u64| t as f64 / 86_400.0;
    let end = result.samples.last().map_or(1.0, |s| days(s.t_s)).max(0.01);
    // The VCs holding the most GPUs on average, up to 7; the rest as "other".
    let mut order: Vec<usize> = (0..result.vcs.len()).collect();
    order.sort_by(|a, b| {
        result.vc_mean_held[*b]
            .total_cmp(&result.vc_mean_held[*a])
            .then(a.cmp(b))
    });
    order.truncate(7);
    let root = canvas(file)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Share of allocated GPUs per VC ({})", run.name),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0f64..end, 0.0f64..1.0)
        .map_err(|e| err(file, e))?;
    chart
        .configure_mesh()
        .x_desc("days")
        .y_desc("share of allocated GPUs")
        .draw()
        .map_err(|e| err(file, e))?;
    for (k, &vc) in order.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let points = result.samples.iter().map(move |s| {
            let share = if s.allocated == 0 {
                0.0
            } else {
                f64::from(s.per_vc.get(vc).copied().unwrap_or(0)) / f64::from(s.allocated)
            };
            (days(s.t_s), share)
        });
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(1)))
            .map_err(|e| err(file, e))?
            .label(result.vcs[vc].clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    legend(&mut chart, file)?;
    root.present().map_err(|e| err(file, e))
}
