//! SVG plots with plotters (SVG backend, naive font metrics: no system font needed):
//!
//! - `latency-<size>.svg` and `open-loop-<size>.svg`: latency percentile curves, one line per
//!   transport/operation. The x axis is HdrHistogram's: 0 %, 90 %, 99 %, 99.9 %, ... evenly
//!   spaced (x = log10(1 / (1 - q))), the y axis is microseconds on a log scale.
//! - `bandwidth.svg` and `message-rate.svg`: Gbit/s and Mmsg/s versus size (log2 axis), one
//!   line per transport/operation.

use crate::error::{BenchError, Result};
use crate::report::Measurement;
use crate::workload::{fmt_size, Mode};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The deepest percentile drawn: 99.999 %.
const NINES: f64 = 5.0;

fn err(file: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::output(format!("the plot {}", file.display()), e)
}

fn color(i: usize) -> RGBColor {
    const P: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    P[i % P.len()]
}

fn series_name(m: &Measurement) -> String {
    if m.transport.is_baseline() {
        format!("{} (baseline)", m.transport)
    } else {
        format!("{} {}", m.transport, m.op)
    }
}

fn nines_label(x: &f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    if *x < 0.5 {
        "0%".into()
    } else if *x < 1.5 {
        format!("{q:.0}%")
    } else {
        format!("{q:.*}%", (*x as usize).saturating_sub(2))
    }
}

/// A size axis label: exact where the tick is a power of two, else to one decimal.
fn size_label(x: &f64) -> String {
    let n = x.round() as usize;
    if n.is_power_of_two() {
        return fmt_size(n);
    }
    match *x {
        v if v >= (1 << 20) as f64 => format!("{:.1} MiB", v / (1 << 20) as f64),
        v if v >= 1024.0 => format!("{:.1} KiB", v / 1024.0),
        v => format!("{v:.0} B"),
    }
}

/// A percentile curve per result of `mode` at `size`; `None` when there is none.
fn percentile_plot(ms: &[&Measurement], mode: Mode, size: usize, dir: &Path) -> Result<PathBuf> {
    let file = dir.join(format!(
        "{}-{}.svg",
        mode.name(),
        fmt_size(size).replace(' ', "")
    ));
    let curves: Vec<(String, Vec<(f64, f64)>)> = ms
        .iter()
        .filter_map(|m| {
            let h = m.histogram.as_ref()?;
            if h.is_empty() {
                return None;
            }
            let pts = (0..=(NINES * 20.0) as usize)
                .map(|i| {
                    let x = i as f64 / 20.0;
                    let q = 1.0 - 10f64.powf(-x);
                    (x, (h.value_at_quantile(q).max(1)) as f64 / 1e3)
                })
                .collect();
            Some((series_name(m), pts))
        })
        .collect();
    let (lo, hi) = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = if lo <= hi {
        (lo * 0.8, hi * 1.25)
    } else {
        (0.01, 1.0)
    };
    {
        let root = SVGBackend::new(&file, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&file, e))?;
        let caption = format!(
            "{} by percentile, {}",
            if mode == Mode::OpenLoop {
                "open-loop latency from intended send time"
            } else {
                "round-trip latency"
            },
            fmt_size(size)
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 22))
            .margin(16)
            .margin_right(48)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..NINES, (lo..hi).log_scale())
            .map_err(|e| err(&file, e))?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("microseconds")
            .x_labels((NINES as usize) + 1)
            .x_label_formatter(&nines_label)
            .draw()
            .map_err(|e| err(&file, e))?;
        for (i, (name, pts)) in curves.into_iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(|e| err(&file, e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&file, e))?;
        root.present().map_err(|e| err(&file, e))?;
    }
    Ok(file)
}

/// `metric` (Gbit/s or Mmsg/s) versus size, one line per transport/operation.
fn versus_size(ms: &[&Measurement], rate: bool, dir: &Path) -> Result<Option<PathBuf>> {
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for m in ms {
        let Some(t) = m.throughput else { continue };
        let y = if rate { t.mmsg_per_s } else { t.gbit_per_s };
        lines
            .entry(series_name(m))
            .or_default()
            .push((m.size.max(1) as f64, y));
    }
    if lines.is_empty() {
        return Ok(None);
    }
    let file = dir.join(if rate {
        "message-rate.svg"
    } else {
        "bandwidth.svg"
    });
    let (xmin, xmax, ymax) = lines
        .values()
        .flatten()
        .fold((f64::MAX, 1f64, 0f64), |(a, b, c), &(x, y)| {
            (a.min(x), b.max(x), c.max(y))
        });
    let xmax = if xmax <= xmin { xmin * 2.0 } else { xmax };
    let ymax = if ymax > 0.0 { ymax * 1.15 } else { 1.0 };
    {
        let root = SVGBackend::new(&file, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&file, e))?;
        let caption = if rate {
            "message rate versus size (closed loop)"
        } else {
            "bandwidth versus size (closed loop)"
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 22))
            .margin(16)
            .margin_right(48)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..ymax)
            .map_err(|e| err(&file, e))?;
        chart
            .configure_mesh()
            .x_desc("message size")
            .y_desc(if rate { "million messages/s" } else { "Gbit/s" })
            .x_label_formatter(&size_label)
            .draw()
            .map_err(|e| err(&file, e))?;
        for (i, (name, mut pts)) in lines.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| err(&file, e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(|e| err(&file, e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&file, e))?;
        root.present().map_err(|e| err(&file, e))?;
    }
    Ok(Some(file))
}

/// Writes every plot the measurements allow into `dir` (created if missing); returns the files.
pub fn write_all(ms: &[Measurement], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))?;
    let mut files = Vec::new();
    for mode in [Mode::Latency, Mode::OpenLoop] {
        let mut sizes: Vec<usize> = ms
            .iter()
            .filter(|m| m.mode == mode)
            .map(|m| m.size)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let group: Vec<&Measurement> = ms
                .iter()
                .filter(|m| m.mode == mode && m.size == size && m.histogram.is_some())
                .collect();
            if !group.is_empty() {
                files.push(percentile_plot(&group, mode, size, dir)?);
            }
        }
    }
    let bw: Vec<&Measurement> = ms.iter().filter(|m| m.mode == Mode::Bandwidth).collect();
    for rate in [false, true] {
        if let Some(f) = versus_size(&bw, rate, dir)? {
            files.push(f);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis_labels_read_as_nines() {
        assert_eq!(nines_label(&0.0), "0%");
        assert_eq!(nines_label(&1.0), "90%");
        assert_eq!(nines_label(&2.0), "99%");
        assert_eq!(nines_label(&3.0), "99.9%");
        assert_eq!(nines_label(&4.0), "99.99%");
        assert_eq!(size_label(&4096.0), "4 KiB");
        assert_eq!(size_label(&1_000_000.0), "976.6 KiB");
        assert_eq!(size_label(&100.0), "100 B");
    }
}
