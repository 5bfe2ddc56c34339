//! The sensitivity report as an SVG: waits (top) and Table 2 shares with
//! GPUs allocated (bottom) against the time scale (left) and the quota
//! factor (right), the fitted value marked.

use std::path::Path;

use plotters::prelude::*;

use super::knobs::Knob;
use super::sensitivity::{SensitivityPoint, SensitivityReport, shown};
use crate::plots::{COLORS, PlotError, err, legend};

/// One line of a panel: its label and points.
type Series = (String, Vec<(f64, f64)>);

/// Writes `report` as an SVG to `file`.
pub fn write(file: &Path, report: &SensitivityReport) -> Result<(), PlotError> {
    let root = SVGBackend::new(file, (1100, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(file, e))?;
    let panels = root.split_evenly((2, 2));
    for (col, knob) in [Knob::TimeScale, Knob::QuotaFactor].into_iter().enumerate() {
        let pts: Vec<&SensitivityPoint> = report.points.iter().filter(|p| p.knob == knob).collect();
        if pts.len() < 2 {
            continue;
        }
        let fitted = pts.iter().find(|p| p.factor == 1.0).map(|p| p.value);
        let (waits, shares) = series(&pts);
        let name = knob.as_str();
        let title = format!("waits (min) vs {name}");
        panel(file, &panels[col], (&title, name), &waits, true, fitted)?;
        let title = format!("Table 2 and GPUs allocated (%) vs {name}");
        panel(
            file,
            &panels[2 + col],
            (&title, name),
            &shares,
            false,
            fitted,
        )?;
    }
    root.present().map_err(|e| err(file, e))
}

/// The waits' series and the shares' (Table 2, GPUs allocated) over `pts`.
fn series(pts: &[&SensitivityPoint]) -> (Vec<Series>, Vec<Series>) {
    let mut waits: Vec<Series> = Vec::new();
    let mut shares: Vec<Series> = vec![(
        "GPUs allocated".into(),
        pts.iter()
            .map(|p| (p.value, p.gpu_allocation_mean * 100.0))
            .collect(),
    )];
    let Some(first) = pts.first() else {
        return (waits, shares);
    };
    for (i, item) in first.fit.detail.iter().enumerate() {
        let Some(label) = shown(&item.name) else {
            continue;
        };
        let line: Vec<(f64, f64)> = pts
            .iter()
            .filter_map(|p| p.fit.detail.get(i)?.model.map(|m| (p.value, m)))
            .collect();
        if label.starts_with("T2") {
            shares.push((label, line));
        } else {
            waits.push((
                label,
                line.into_iter().map(|(x, y)| (x, y.max(0.01))).collect(),
            ));
        }
    }
    (waits, shares)
}

/// One panel: `lines` over their x range, a log y axis for waits, a
/// vertical line at the fitted value.
fn panel(
    file: &Path,
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    (title, x_name): (&str, &str),
    lines: &[Series],
    log: bool,
    fitted: Option<f64>,
) -> Result<(), PlotError> {
    let xs = lines.iter().flat_map(|(_, l)| l.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    if x0 >= x1 {
        return Ok(());
    }
    let ys = lines.iter().flat_map(|(_, l)| l.iter().map(|p| p.1));
    let (bottom, top) = ys.fold((1.0f64, 1.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let bottom = (bottom / 2.0).max(0.01);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(45);
    if log {
        let mut chart = builder
            .build_cartesian_2d(x0..x1, (bottom..top * 2.0).log_scale())
            .map_err(|e| err(file, e))?;
        chart
            .configure_mesh()
            .x_desc(x_name)
            .draw()
            .map_err(|e| err(file, e))?;
        draw_lines(file, &mut chart, lines, fitted, (bottom, top * 2.0))?;
        legend(&mut chart, file)
    } else {
        let mut chart = builder
            .build_cartesian_2d(x0..x1, 0.0f64..100.0)
            .map_err(|e| err(file, e))?;
        chart
            .configure_mesh()
            .x_desc(x_name)
            .draw()
            .map_err(|e| err(file, e))?;
        draw_lines(file, &mut chart, lines, fitted, (0.0, 100.0))?;
        legend(&mut chart, file)
    }
}

/// Draws `lines` (p90s thinner than medians, a colour per size) and the
/// fitted value as a grey vertical line from `y.0` to `y.1`.
fn draw_lines<'a, CT>(
    file: &Path,
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    lines: &[Series],
    fitted: Option<f64>,
    y: (f64, f64),
) -> Result<(), PlotError>
where
    CT: CoordTranslate<From = (f64, f64)>,
{
    if let Some(x) = fitted {
        chart
            .draw_series(LineSeries::new(
                [(x, y.0), (x, y.1)],
                COLORS[7].stroke_width(1),
            ))
            .map_err(|e| err(file, e))?
            .label("fitted")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], COLORS[7]));
    }
    let mut groups: Vec<&str> = Vec::new();
    for (label, points) in lines {
        let p90 = label.ends_with(" p90");
        let group = label.trim_end_matches(" p50").trim_end_matches(" p90");
        let k = groups.iter().position(|g| *g == group).unwrap_or_else(|| {
            groups.push(group);
            groups.len() - 1
        });
        let color = COLORS[k % 7];
        let width = if p90 { 1 } else { 3 };
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(width),
            ))
            .map_err(|e| err(file, e))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new(*p, 2 + width / 2, color.filled())),
            )
            .map_err(|e| err(file, e))?;
    }
    Ok(())
}
