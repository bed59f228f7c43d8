//! `simulate --plot`: hit ratio and byte hit ratio against cache size, one line per policy and
//! eviction, and hit ratio against cache writes (the Pareto view: what each pair buys per
//! write), as an SVG.

use super::Report;
use crate::trace::distance::Distances;
use crate::trace::stats::TraceStats;
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

/// A count on a log axis, short: `20k`, `1.5M`, `300`.
fn count_label(x: f64) -> String {
    for (scale, unit) in [(1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if x >= scale {
            let v = x / scale;
            return if (v - v.round()).abs() < 1e-9 {
                format!("{v:.0}{unit}")
            } else {
                format!("{v:.1}{unit}")
            };
        }
    }
    format!("{x:.0}")
}

/// Ticks for a log axis from `lo` to `hi`: 1, 2 and 5 of every decade between.
fn log_ticks((lo, hi): (f64, f64)) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.max(1e-9).log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

/// The last path component of a trace's name as given (a title has no room for directories).
fn short_name(trace: &str) -> String {
    Path::new(trace)
        .file_name()
        .map_or_else(|| trace.to_string(), |n| n.to_string_lossy().into_owned())
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
    let mut sizes: Vec<u64> = report
        .results
        .iter()
        .map(|r| r.capacity_bytes.max(1))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let plot = Plot {
        path,
        series: series(report),
        sizeless: report.summary.requested_bytes == report.summary.requests,
        ticks: sizes
            .iter()
            .map(|&b| (b as f64, report.size_label(b)))
            .collect(),
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
        short_name(&report.trace),
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
    /// Every simulated size, with its label in the table.
    ticks: Vec<(f64, String)>,
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
            .build_cartesian_2d(
                (lo..hi)
                    .log_scale()
                    .with_key_points(self.ticks.iter().map(|t| t.0).collect()),
                0.0..self.ymax(pick),
            )
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc(if self.sizeless {
                "cache size (objects)"
            } else {
                "cache size"
            })
            .y_desc(label)
            .x_labels(self.ticks.len())
            .x_label_formatter(&|x| self.tick_label(*x))
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
        legend(&mut chart).map_err(|e| fail(&e))
    }

    /// Hit ratio against cache writes: up and to the left is better.
    fn by_writes(&self, panel: &Panel<'_>) -> Result<(), PlotError> {
        let fail = |e: &dyn std::fmt::Display| self.fail(e);
        let (wlo, whi) = span(self.series.iter().flat_map(|(_, p)| p.iter().map(|p| p.3)));
        let ticks = log_ticks((wlo, whi));
        let mut chart = ChartBuilder::on(panel)
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(56)
            .build_cartesian_2d(
                (wlo..whi).log_scale().with_key_points(ticks.clone()),
                0.0..self.ymax(|p| p.1),
            )
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc("cache writes (admissions; fewer is better)")
            .y_desc("hit ratio (%)")
            .x_labels(ticks.len())
            .x_label_formatter(&|x| count_label(*x))
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, (name, pts)) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut by_writes = pts.clone();
            by_writes.sort_by(|a, b| a.3.total_cmp(&b.3));
            chart
                .draw_series(LineSeries::new(
                    by_writes.iter().map(|p| (p.3, p.1)),
                    color.mix(0.5).stroke_width(1),
                ))
                .map_err(|e| fail(&e))?
                .label(name.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
            chart
                .draw_series(
                    by_writes
                        .iter()
                        .map(|p| Circle::new((p.3, p.1), 4, color.filled())),
                )
                .map_err(|e| fail(&e))?;
        }
        legend(&mut chart).map_err(|e| fail(&e))
    }

    /// The table's label of the simulated size at `x` (plotters hands the key points back as
    /// given; a point between sizes, which it does not ask for, gets the nearest one's).
    fn tick_label(&self, x: f64) -> String {
        self.ticks
            .iter()
            .min_by(|a, b| (a.0 - x).abs().total_cmp(&(b.0 - x).abs()))
            .map_or_else(String::new, |t| t.1.clone())
    }
}

/// Draws a chart's legend in its upper left corner.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
}

/// `trace-stats --plot`: the share of second requests within each distance from the first, in
/// bytes (the LRU stack distance, with the cache sizes marked) and in seconds (with the
/// admission windows marked), on log axes, as an SVG.
pub fn plot_distances(
    stats: &TraceStats,
    distances: &Distances,
    trace: &str,
    path: &Path,
) -> Result<(), PlotError> {
    let fail = |e: &dyn std::fmt::Display| PlotError {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let Some(summary) = &stats.second_request_distance else {
        return Err(fail(&"no second-request distances measured"));
    };
    let sizeless = stats.requested_bytes == stats.requests;
    let size = |b: u64| {
        if sizeless {
            format!("{} obj", units::count(b))
        } else {
            units::bytes(b)
        }
    };
    let root = SVGBackend::new(path, (1400, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let title = format!(
        "{}: first to second request, {} objects requested twice or more",
        short_name(trace),
        units::count(summary.second_requests)
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let panels = root.split_evenly((1, 2));
    let bytes: Vec<f64> = distances.bytes.iter().map(|&b| b.max(1) as f64).collect();
    let marks: Vec<(f64, String)> = summary
        .lru_bound
        .iter()
        .map(|b| {
            let label = match b.capacity_fraction {
                Some(f) => format!("{} ({} %)", size(b.capacity_bytes), f * 100.0),
                None => size(b.capacity_bytes),
            };
            (b.capacity_bytes.max(1) as f64, label)
        })
        .collect();
    let desc = if sizeless {
        "LRU stack distance (objects)"
    } else {
        "LRU stack distance (bytes)"
    };
    let (lo, hi) = span(bytes.iter().copied().chain(marks.iter().map(|m| m.0)));
    // Powers of 1,024 and 32 x them, in the units of the table; powers of ten for objects.
    let byte_ticks: Vec<f64> = if sizeless {
        log_ticks((lo, hi))
            .into_iter()
            .filter(|t| t.log10().fract() == 0.0)
            .collect()
    } else {
        (0..=60)
            .step_by(5)
            .map(|p| 2f64.powi(p))
            .filter(|&t| t >= lo && t <= hi)
            .collect()
    };
    cdf_panel(
        &panels[0],
        &bytes,
        &marks,
        (desc, "cache"),
        &byte_ticks,
        &|x| size(x.round() as u64),
    )
    .map_err(|e| fail(&e))?;
    let seconds: Vec<f64> = distances
        .times
        .iter()
        .map(|t| t.as_secs_f64().max(1e-3))
        .collect();
    let windows: Vec<(f64, String)> = summary
        .within_window
        .iter()
        .map(|w| (w.window_secs, w.window.clone()))
        .collect();
    let (lo, hi) = span(seconds.iter().copied().chain(windows.iter().map(|m| m.0)));
    let time_ticks: Vec<f64> = [
        0.001,
        0.01,
        0.1,
        1.0,
        10.0,
        60.0,
        600.0,
        3600.0,
        21_600.0,
        86_400.0,
        604_800.0,
        2_592_000.0,
        31_536_000.0,
    ]
    .into_iter()
    .filter(|&t| t >= lo && t <= hi)
    .collect();
    cdf_panel(
        &panels[1],
        &seconds,
        &windows,
        ("trace time from first to second request", "window"),
        &time_ticks,
        &|x| units::duration(Some(std::time::Duration::from_secs_f64(x))),
    )
    .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// One panel of [`plot_distances`]: the cumulative share of `sorted` (ascending, all above 0)
/// on a log x axis ticked at `ticks`, with a dashed line at each mark, named in the legend.
fn cdf_panel(
    panel: &Panel<'_>,
    sorted: &[f64],
    marks: &[(f64, String)],
    (x_desc, marks_name): (&str, &str),
    ticks: &[f64],
    label: &dyn Fn(f64) -> String,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let (lo, hi) = span(sorted.iter().copied().chain(marks.iter().map(|m| m.0)));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (0.5, 2.0) };
    let mut chart = ChartBuilder::on(panel)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(ticks.to_vec()),
            0.0..100.0,
        )?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("second requests within (%)")
        .x_labels(ticks.len())
        .x_label_formatter(&|x| label(*x))
        .draw()?;
    // At most 500 points: the steps of a long trace's curve are finer than the drawing.
    let n = sorted.len();
    let step = n.div_ceil(500).max(1);
    let points: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .chain(n.checked_sub(1))
        .map(|i| (sorted[i], (i + 1) as f64 * 100.0 / n as f64))
        .collect();
    let color = COLORS[0];
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))?
        .label("second requests")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    for (i, (x, name)) in marks.iter().enumerate() {
        let mark = COLORS[1 + i % (COLORS.len() - 1)];
        chart
            .draw_series(DashedLineSeries::new(
                vec![(*x, 0.0), (*x, 100.0)],
                6,
                4,
                mark.stroke_width(2),
            ))?
            .label(format!("{marks_name} {name}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], mark.stroke_width(2))
            });
    }
    legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::{count_label, log_ticks, short_name};

    #[test]
    fn counts_read_short_and_log_ticks_cover_the_span() {
        assert_eq!(count_label(1e4), "10k");
        assert_eq!(count_label(1.5e6), "1.5M");
        assert_eq!(count_label(500.0), "500");
        assert_eq!(
            log_ticks((150.0, 2_500.0)),
            vec![200.0, 500.0, 1_000.0, 2_000.0]
        );
        assert_eq!(short_name("/a/b/trace.bin.gz"), "trace.bin.gz");
        assert_eq!(short_name("trace"), "trace");
    }
}
