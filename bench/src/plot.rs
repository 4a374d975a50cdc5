//! The scaling plot beside docs/BENCHMARKS.md: for every case measured at
//! more than one table size, merge seconds and peak RSS against target rows
//! (both axes logarithmic) for icemerge's local engine (copy-on-write and
//! merge-on-read), delta-rs and the copy-on-write floor, as SVG.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{CaseResult, EngineResult, Report};

/// One line of a chart.
struct Series {
    name: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

const MIB: f64 = 1024.0 * 1024.0;

/// Writes the plot of `report` to `path`; with no case measured at two
/// sizes or more there is nothing to plot and the file is left alone.
pub fn write_svg(path: &Path, report: &Report) -> Result<()> {
    let mut scales: Vec<_> = report.scales.iter().collect();
    scales.sort_by_key(|s| s.rows);
    let mut names: Vec<&str> = vec![];
    for scale in &scales {
        for case in &scale.cases {
            let sizes = scales
                .iter()
                .filter(|s| s.cases.iter().any(|c| c.name == case.name))
                .count();
            if sizes > 1 && !names.contains(&case.name.as_str()) {
                names.push(&case.name);
            }
        }
    }
    if names.is_empty() {
        return Ok(());
    }
    let height = 320 * names.len() as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let panels = root.split_evenly((names.len(), 2));
    for (i, name) in names.iter().enumerate() {
        let points = |value: &dyn Fn(&CaseResult) -> Option<f64>| -> Vec<(f64, f64)> {
            scales
                .iter()
                .filter_map(|s| {
                    let case = s.cases.iter().find(|c| c.name == *name)?;
                    Some((s.rows as f64, value(case)?))
                })
                .collect()
        };
        let seconds = |e: &Option<EngineResult>| e.as_ref()?.median_seconds();
        let rss = |e: &Option<EngineResult>| Some(e.as_ref()?.median_process_rss()? / MIB);
        // Per chart: icemerge in both write modes and delta-rs.
        let lines = |engine: &dyn Fn(&Option<EngineResult>) -> Option<f64>,
                     delta: &dyn Fn(&CaseResult) -> Option<f64>| {
            vec![
                Series {
                    name: "icemerge copy-on-write",
                    color: BLUE,
                    points: points(&|c| engine(&c.local)),
                },
                Series {
                    name: "icemerge merge-on-read",
                    color: GREEN,
                    points: points(&|c| engine(&c.local_mor)),
                },
                Series {
                    name: "delta-rs",
                    color: RED,
                    points: points(delta),
                },
            ]
        };
        let mut time = lines(&seconds, &|c| c.peer_seconds("delta"));
        time.push(Series {
            name: "copy-on-write floor",
            color: BLACK,
            points: points(&|c| c.floor_seconds()),
        });
        let memory = lines(&rss, &|c| Some(c.peer_rss("delta")? / MIB));
        chart(&panels[2 * i], &format!("{name}: merge seconds"), &time)?;
        chart(
            &panels[2 * i + 1],
            &format!("{name}: peak RSS (MiB)"),
            &memory,
        )?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("benchmark plot: {e}")
}

/// An axis label with about two significant digits.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `lo..hi` widened so that points do not sit on the frame.
fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) =
        values
            .filter(|v| *v > 0.0)
            .fold(None, |acc: Option<(f64, f64)>, v| match acc {
                None => Some((v, v)),
                Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
            })?;
    Some((lo / 1.6, hi * 1.6))
}

fn chart(area: &DrawingArea<SVGBackend, Shift>, caption: &str, series: &[Series]) -> Result<()> {
    let all = || series.iter().flat_map(|s| s.points.iter().copied());
    let (Some((x0, x1)), Some((y0, y1))) = (span(all().map(|p| p.0)), span(all().map(|p| p.1)))
    else {
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("target rows")
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .y_label_formatter(&|y| short(*y))
        .draw()
        .map_err(plot_err)?;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}
