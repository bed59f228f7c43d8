//! `simulate --plot`: hit ratio and byte hit ratio against cache size, one line per policy and
//! eviction, and hit ratio against cache writes (the Pareto view: what each pair buys per
//! write), as an SVG.

use super::Report;
use plotters::coord::Shift;
use plotters::prelude::*;
use secondhit_proxy::units;
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

/// A point: (cache size, hit ratio %, byte hit ratio %, cache writes).
type Point = (f64, f64, f64, f64);
/// Picks the y value of a panel from a point.
type Pick = fn(&Point) -> f64;

/// A log-axis tick (plotters puts them at powers of ten): `1 MB`, `10 kB`, or a plain count
/// of objects for traces without sizes.
fn axis_label(x: f64, objects: bool) -> String {
    let units: [(f64, &str); 4] = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in units {
        if x >= scale {
            let v = x / scale;
            let v = if v.fract().abs() < 1e-9 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            };
            return if objects {
                format!("{v}{}", &unit[..1])
            } else {
                format!("{v} {unit}")
            };
        }
    }
    if objects {
        format!("{x:.0}")
    } else {
        format!("{x:.0} B")
    }
}

/// The plot could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot draw the plot: {message}", path.display())]
pub struct PlotError {
    /// The SVG file.
    pub path: std::path::PathBuf,
    /// What the drawing library said.
    pub message: String,
}

/// Draws the report into an SVG file: three panels side by side: hit ratio and byte hit ratio
/// against cache size on a log axis, and hit ratio against cache writes.
pub fn plot_svg(report: &Report, path: &Path) -> Result<(), PlotError> {
    let plot = Plot {
        path,
        series: series(report),
        sizeless: report.summary.requested_bytes == report.summary.requests,
    };
    if report.results.iter().any(|r| r.disk.is_some()) {
        return Err(plot.fail(
            &"two-tier runs (--disk-capacity) are not plotted yet: use the table, --json or --csv",
        ));
    }
    let sizes = span(
        report
            .results
            .iter()
            .map(|r| r.capacity_bytes.max(1) as f64),
    );
    let root = SVGBackend::new(path, (1800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot.fail(&e))?;
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
        .map_err(|e| plot.fail(&e))?;
    let panels = root.split_evenly((1, 3));
    let specs: [(&str, Pick); 2] = [("hit ratio (%)", |p| p.1), ("byte hit ratio (%)", |p| p.2)];
    for (panel, (label, pick)) in panels.iter().zip(specs) {
        plot.by_size(panel, sizes, label, pick)?;
    }
    plot.by_writes(&panels[2])?;
    root.present().map_err(|e| plot.fail(&e))?;
    Ok(())
}

/// One series per policy and eviction, in the order they first appear, each sorted by cache
/// size.
fn series(report: &Report) -> Vec<(String, Vec<Point>)> {
    let mut series: Vec<(String, Vec<Point>)> = Vec::new();
    for r in &report.results {
        let name = format!("{} ({})", r.policy, r.eviction);
        let point = (
            r.capacity_bytes.max(1) as f64,
            r.hit_ratio * 100.0,
            r.byte_hit_ratio * 100.0,
            r.admissions.max(1) as f64,
        );
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push(point),
            None => series.push((name, vec![point])),
        }
    }
    for (_, pts) in series.iter_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// A log axis's range around `xs`, with some room at both ends.
fn span(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if lo >= hi {
        (lo / 2.0, lo * 2.0)
    } else {
        (lo / 1.3, hi * 1.3)
    }
}

/// A panel of the plot.
type Panel<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What every panel draws from.
struct Plot<'a> {
    path: &'a Path,
    series: Vec<(String, Vec<Point>)>,
    /// The trace has no sizes: its cache sizes are in objects.
    sizeless: bool,
}

impl Plot<'_> {
    fn fail(&self, e: &dyn std::fmt::Display) -> PlotError {
        PlotError {
            path: self.path.to_path_buf(),
            message: e.to_string(),
        }
    }

    /// The top of a y axis: the largest value `pick` finds, with room above, on a multiple of 5.
    fn ymax(&self, pick: Pick) -> f64 {
        let m = self
            .series
            .iter()
            .flat_map(|(_, p)| p.iter().map(pick))
            .fold(0.0f64, f64::max);
        ((m * 1.1) / 5.0).ceil().max(1.0) * 5.0
    }

    /// A panel of `pick` (labelled `label`) against cache size, from `lo` to `hi`, with a legend.
    fn by_size(
        &self,
        panel: &Panel<'_>,
        (lo, hi): (f64, f64),
        label: &str,
        pick: Pick,
    ) -> Result<(), PlotError> {
        let fail = |e: &dyn std::fmt::Display| self.fail(e);
        let mut chart = ChartBuilder::on(panel)
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(56)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..self.ymax(pick))
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc(if self.sizeless {
                "cache size (objects)"
            } else {
                "cache size (bytes)"
            })
            .y_desc(label)
            .x_label_formatter(&|x| axis_label(*x, self.sizeless))
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, (name, pts)) in self.series.iter().enumerate() {
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
        Ok(())
    }

    /// Hit ratio against cache writes: up and to the left is better.
    fn by_writes(&self, panel: &Panel<'_>) -> Result<(), PlotError> {
        let fail = |e: &dyn std::fmt::Display| self.fail(e);
        let (wlo, whi) = span(self.series.iter().flat_map(|(_, p)| p.iter().map(|p| p.3)));
        let mut chart = ChartBuilder::on(panel)
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(56)
            .build_cartesian_2d((wlo..whi).log_scale(), 0.0..self.ymax(|p| p.1))
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc("cache writes (admissions; fewer is better)")
            .y_desc("hit ratio (%)")
            .x_label_formatter(&|x| axis_label(*x, true))
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, (_, pts)) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut by_writes = pts.clone();
            by_writes.sort_by(|a, b| a.3.total_cmp(&b.3));
            chart
                .draw_series(LineSeries::new(
                    by_writes.iter().map(|p| (p.3, p.1)),
                    color.mix(0.5).stroke_width(1),
                ))
                .map_err(|e| fail(&e))?;
            chart
                .draw_series(
                    by_writes
                        .iter()
                        .map(|p| Circle::new((p.3, p.1), 4, color.filled())),
                )
                .map_err(|e| fail(&e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::axis_label;

    #[test]
    fn axis_labels_read_as_decimal_sizes() {
        assert_eq!(axis_label(1e6, false), "1 MB");
        assert_eq!(axis_label(10e6, false), "10 MB");
        assert_eq!(axis_label(2.5e9, false), "2.5 GB");
        assert_eq!(axis_label(100.0, false), "100 B");
        assert_eq!(axis_label(1e4, true), "10k");
        assert_eq!(axis_label(500.0, true), "500");
    }
}
