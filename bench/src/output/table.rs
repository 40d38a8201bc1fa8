//! The terminal table: one block per mode, each result beside the baselines with the ratio
//! (`0.20x tcp`: this result's p50 latency is a fifth of kernel TCP's at the same size; for
//! bandwidth the ratio is of Gbit/s, so above 1 is faster).

use crate::report::Measurement;
use crate::workload::{fmt_size, Mode, TransportKind};
use std::fmt::Write;

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A ratio with about three significant digits: 0.00215x, 0.215x, 2.15x, 215x.
fn ratio(r: f64) -> String {
    match r {
        r if r >= 100.0 => format!("{r:.0}x"),
        r if r >= 0.1 => format!("{r:.2}x"),
        r if r >= 0.01 => format!("{r:.3}x"),
        r => format!("{r:.4}x"),
    }
}

fn ratio_cell(m: &Measurement, base: TransportKind) -> String {
    m.vs.iter()
        .find(|r| r.baseline == base)
        .map(|r| ratio(r.ratio))
        .unwrap_or_else(|| "-".into())
}

/// Lays out rows with the first `left` columns left-aligned and the rest right-aligned.
fn layout(header: &[String], rows: &[Vec<String>], left: usize) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if i < left {
                let _ = write!(s, "{c:<width$}", width = w[i]);
            } else {
                let _ = write!(s, "{c:>width$}", width = w[i]);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut out, header);
    let total: usize = w.iter().sum::<usize>() + 2 * (w.len().saturating_sub(1));
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for r in rows {
        line(&mut out, r);
    }
    out
}

/// The table for every mode present in `ms`, with one ratio column per baseline measured.
pub fn render(ms: &[Measurement]) -> String {
    let mut bases: Vec<TransportKind> = ms
        .iter()
        .filter(|m| m.transport.is_baseline())
        .map(|m| m.transport)
        .collect();
    bases.sort();
    bases.dedup();
    let mut out = String::new();
    for mode in [Mode::Latency, Mode::Bandwidth, Mode::OpenLoop] {
        let rows: Vec<&Measurement> = ms.iter().filter(|m| m.mode == mode).collect();
        if rows.is_empty() {
            continue;
        }
        let mut header: Vec<String> = ["transport", "op", "size"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cols: &[&str] = match mode {
            Mode::Latency => &[
                "count", "min", "p50", "p90", "p99", "p99.9", "p99.99", "max",
            ],
            Mode::Bandwidth => &["window", "qps", "messages", "Gbit/s", "Mmsg/s"],
            Mode::OpenLoop => &[
                "offered/s",
                "Mmsg/s",
                "count",
                "p50",
                "p99",
                "p99.9",
                "p99.99",
                "max",
            ],
        };
        header.extend(cols.iter().map(|s| s.to_string()));
        let metric = if mode == Mode::Bandwidth {
            "Gbit/s"
        } else {
            "p50"
        };
        header.extend(bases.iter().map(|b| format!("{metric} vs {b}")));
        let body: Vec<Vec<String>> = rows
            .iter()
            .map(|m| {
                let mut r = vec![m.transport.to_string(), m.op.clone(), fmt_size(m.size)];
                let p = m.latency_us;
                let t = m.throughput;
                let cell = |f: fn(&crate::report::Percentiles) -> f64| {
                    p.as_ref().map(|p| us(f(p))).unwrap_or_else(|| "-".into())
                };
                match mode {
                    Mode::Latency => {
                        r.push(m.count.to_string());
                        r.push(cell(|p| p.min));
                        r.push(cell(|p| p.p50));
                        r.push(cell(|p| p.p90));
                        r.push(cell(|p| p.p99));
                        r.push(cell(|p| p.p99_9));
                        r.push(cell(|p| p.p99_99));
                        r.push(cell(|p| p.max));
                    }
                    Mode::Bandwidth => {
                        r.push(m.window.to_string());
                        r.push(m.qps.to_string());
                        r.push(m.count.to_string());
                        r.push(t.map_or("-".into(), |t| format!("{:.2}", t.gbit_per_s)));
                        r.push(t.map_or("-".into(), |t| format!("{:.3}", t.mmsg_per_s)));
                    }
                    Mode::OpenLoop => {
                        r.push(m.offered_rate.map_or("-".into(), |v| format!("{v:.0}")));
                        r.push(t.map_or("-".into(), |t| format!("{:.3}", t.mmsg_per_s)));
                        r.push(m.count.to_string());
                        r.push(cell(|p| p.p50));
                        r.push(cell(|p| p.p99));
                        r.push(cell(|p| p.p99_9));
                        r.push(cell(|p| p.p99_99));
                        r.push(cell(|p| p.max));
                    }
                }
                r.extend(bases.iter().map(|&b| ratio_cell(m, b)));
                r
            })
            .collect();
        let title = match mode {
            Mode::Latency => "latency: round trip, one in flight, microseconds",
            Mode::Bandwidth => "bandwidth: closed loop, a window in flight per QP",
            Mode::OpenLoop => {
                "open loop: latency from intended send time to delivery, microseconds"
            }
        };
        let _ = writeln!(out, "{title}");
        out.push_str(&layout(&header, &body, 3));
        let staged: Vec<&&Measurement> = rows
            .iter()
            .filter(|m| m.stages.is_some_and(|s| !s.is_empty()))
            .collect();
        if !staged.is_empty() {
            let h: Vec<String> = [
                "transport",
                "op",
                "size",
                "post",
                "wait",
                "ring",
                "engine",
                "tcp",
                "port",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let b: Vec<Vec<String>> = staged
                .iter()
                .map(|m| {
                    let s = m.stages.unwrap_or_default();
                    let c = |v: Option<f64>| v.map_or("-".into(), us);
                    vec![
                        m.transport.to_string(),
                        m.op.clone(),
                        fmt_size(m.size),
                        c(s.post_us),
                        c(s.wait_us),
                        c(s.ring_us),
                        c(s.engine_us),
                        c(s.tcp_us),
                        c(s.port_us),
                    ]
                })
                .collect();
            let _ = writeln!(out, "\nper-stage mean per exchange, microseconds");
            out.push_str(&layout(&h, &b, 3));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{attach_ratios, Percentiles};
    use hdrhistogram::Histogram;

    fn m(t: TransportKind, op: &str, ns: u64) -> Measurement {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(ns).unwrap();
        Measurement {
            mode: Mode::Latency,
            transport: t,
            op: op.into(),
            size: 64,
            window: 1,
            qps: 1,
            threads: 1,
            count: 1,
            seconds: 0.0,
            latency_us: Some(Percentiles::of(&h)),
            throughput: None,
            offered_rate: None,
            stages: None,
            hdr_tag: None,
            vs: vec![],
            histogram: None,
        }
    }

    #[test]
    fn the_table_shows_each_result_with_its_ratio_to_each_baseline() {
        let mut ms = vec![
            m(TransportKind::Tcp, "message", 20_000),
            m(TransportKind::Shm, "message", 400),
            m(TransportKind::Verbs, "write", 4_000),
        ];
        attach_ratios(&mut ms);
        let t = render(&ms);
        assert!(t.contains("p50 vs shm") && t.contains("p50 vs tcp"), "{t}");
        let write = t.lines().find(|l| l.starts_with("verbs")).unwrap();
        assert!(write.contains("0.20x"), "{write}");
        assert!(write.contains("10.00x"), "{write}");
        assert_eq!(ratio(0.002151), "0.0022x");
        assert_eq!(ratio(450.2), "450x");
        assert!(write.contains("64 B"), "{write}");
    }
}
