//! `simulate --plot`: hit ratio and byte hit ratio against cache size, one line per policy and
//! eviction, as an SVG.

use super::Report;
use crate::units;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// A point: (cache size, hit ratio %, byte hit ratio %).
type Point = (f64, f64, f64);
/// Picks the y value of a panel from a point.
type Pick = fn(&Point) -> f64;

/// Draws the report into an SVG file: two panels side by side (hit ratio, byte hit ratio), cache
/// size on a log axis.
pub fn plot_svg(report: &Report, path: &Path) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: cannot draw the plot: {e}", path.display());
    let mut series: Vec<(String, Vec<Point>)> = Vec::new();
    for r in &report.results {
        let name = format!("{} ({})", r.policy, r.eviction);
        let point = (
            r.capacity_bytes.max(1) as f64,
            r.hit_ratio * 100.0,
            r.byte_hit_ratio * 100.0,
        );
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push(point),
            None => series.push((name, vec![point])),
        }
    }
    for (_, pts) in series.iter_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xs = report
        .results
        .iter()
        .map(|r| r.capacity_bytes.max(1) as f64);
    let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo, hi) = if lo >= hi {
        (lo / 2.0, lo * 2.0)
    } else {
        (lo / 1.3, hi * 1.3)
    };
    let ymax = |pick: Pick| {
        let m = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(pick))
            .fold(0.0f64, f64::max);
        ((m * 1.1) / 5.0).ceil().max(1.0) * 5.0
    };

    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let title = format!(
        "{}: {} requests, {:.1} % one-hit wonders (window {}, {} store)",
        report.trace,
        units::count(report.summary.requests),
        report.summary.one_hit_wonder_ratio * 100.0,
        report.settings.window,
        report.settings.store
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let panels = root.split_evenly((1, 2));
    let specs: [(&str, Pick); 2] = [("hit ratio (%)", |p| p.1), ("byte hit ratio (%)", |p| p.2)];
    let size_axis = if report.summary.working_set_bytes == report.summary.objects {
        "cache size (objects)"
    } else {
        "cache size (bytes)"
    };
    for (panel, (label, pick)) in panels.iter().zip(specs) {
        let mut chart = ChartBuilder::on(panel)
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(56)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..ymax(pick))
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc(size_axis)
            .y_desc(label)
            .x_label_formatter(&|x| units::bytes(*x as u64).replace(".0 ", " "))
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|p| (p.0, pick(p))),
                    color.stroke_width(2),
                ))
                .map_err(|e| fail(&e))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    pts.iter()
                        .map(|p| Circle::new((p.0, pick(p)), 3, color.filled())),
                )
                .map_err(|e| fail(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
