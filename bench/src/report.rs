//! The results: one [`Measurement`] per (mode, transport, operation, size), gathered in a
//! [`Report`] that serializes to the JSON people feed to tools.
//!
//! JSON shape (stable field names; `null` where not applicable):
//!
//! ```text
//! { "tool": "iwarp-bench", "version", "command": [..], "started_unix_s",
//!   "machine": { "hostname", "cpu", "cores", "kernel" },
//!   "settings": { "modes", "ops", "baselines", "sizes", "iterations", "duration_s", "warmup",
//!                 "window", "qps", "threads", "initiator_cores", "responder_cores", "rate",
//!                 "stages", "cq_per_qp", "endpoint": { "port", "dpdk_vdev", "hugepages", "daemon_cores", "daemon_workers",
//!                 "daemons", ... } },
//!   "measurements": [ { "mode", "transport", "op", "size", "window", "qps", "threads",
//!       "count", "seconds",
//!       "latency_us": { "min", "p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "stdev" },
//!       "throughput": { "messages", "bytes", "gbit_per_s", "mmsg_per_s" },
//!       "offered_rate", "stages": { "post_us", "wait_us", "ring_us", "engine_us", "tcp_us",
//!       "port_us" }, "hdr_tag", "vs": [ { "baseline", "metric", "baseline_value", "ratio" } ]
//!   } ],
//!   "hdr_log", "plots": [..] }
//! ```

use crate::stages::Stages;
use crate::workload::{Mode, TransportKind};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    #[serde(rename = "p99.99")]
    pub p99_99: f64,
    pub max: f64,
    pub mean: f64,
    pub stdev: f64,
}

impl Percentiles {
    /// From a histogram of nanoseconds.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        let us = |ns: u64| ns as f64 / 1e3;
        Percentiles {
            min: us(h.min()),
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p99_9: us(h.value_at_quantile(0.999)),
            p99_99: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
            mean: h.mean() / 1e3,
            stdev: h.stdev() / 1e3,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub messages: u64,
    pub bytes: u64,
    pub gbit_per_s: f64,
    pub mmsg_per_s: f64,
}

impl Throughput {
    pub fn new(messages: u64, size: usize, seconds: f64) -> Throughput {
        let bytes = messages * size as u64;
        let s = seconds.max(1e-12);
        Throughput {
            messages,
            bytes,
            gbit_per_s: bytes as f64 * 8.0 / s / 1e9,
            mmsg_per_s: messages as f64 / s / 1e6,
        }
    }
}

/// A result set beside a baseline's: `ratio` = this result's `metric` / the baseline's.
/// For latency (`p50`) below 1 is faster than the baseline; for `gbit_per_s` above 1 is more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub baseline: TransportKind,
    pub metric: String,
    pub baseline_value: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurement {
    pub mode: Mode,
    pub transport: TransportKind,
    /// The verbs operation, or `message` for a baseline.
    pub op: String,
    pub size: usize,
    pub window: usize,
    pub qps: usize,
    pub threads: usize,
    /// Exchanges measured (histogram entries for latency and open-loop, messages delivered
    /// for bandwidth); warm-up excluded.
    pub count: u64,
    /// Wall time of the measured part.
    pub seconds: f64,
    pub latency_us: Option<Percentiles>,
    pub throughput: Option<Throughput>,
    /// Open-loop: the offered rate, messages per second over all QPs.
    pub offered_rate: Option<f64>,
    pub stages: Option<Stages>,
    /// The tag of this result's histogram in the HdrHistogram log.
    pub hdr_tag: Option<String>,
    pub vs: Vec<Ratio>,
    /// The latency histogram in nanoseconds (not serialized: see the HdrHistogram log).
    #[serde(skip)]
    pub histogram: Option<Histogram<u64>>,
}

impl Measurement {
    /// The tag naming this result in histogram logs and plots (no spaces or commas).
    pub fn tag(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.mode.name(),
            self.transport.name(),
            self.op,
            self.size
        )
    }

    /// The metric compared with the baselines, and its value.
    pub fn headline(&self) -> Option<(&'static str, f64)> {
        match self.mode {
            Mode::Latency | Mode::OpenLoop => self.latency_us.map(|p| ("p50", p.p50)),
            Mode::Bandwidth => self.throughput.map(|t| ("gbit_per_s", t.gbit_per_s)),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        Machine {
            hostname: read("/proc/sys/kernel/hostname"),
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub modes: Vec<Mode>,
    pub ops: Vec<String>,
    pub baselines: Vec<String>,
    pub sizes: Vec<usize>,
    pub iterations: Option<u64>,
    pub duration_s: Option<f64>,
    pub warmup: u64,
    pub window: usize,
    pub qps: usize,
    pub threads: usize,
    pub initiator_cores: Vec<Option<usize>>,
    pub responder_cores: Vec<Option<usize>>,
    pub rate: Option<f64>,
    pub stages: bool,
    /// Each initiating QP had a send CQ of its own (else the QPs of a context shared them).
    #[serde(default)]
    pub cq_per_qp: bool,
    pub endpoint: crate::cli::EndpointPlan,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub version: String,
    pub command: Vec<String>,
    pub started_unix_s: u64,
    pub machine: Machine,
    pub settings: Settings,
    pub measurements: Vec<Measurement>,
    /// The spawned or running daemons' memory, idle and at the end (empty without verbs).
    #[serde(default)]
    pub daemon_memory: Vec<crate::stages::DaemonMemory>,
    pub hdr_log: Option<String>,
    pub plots: Vec<String>,
}

/// Fills `vs` of every measurement with its ratio to each baseline measured in the same mode
/// at the same size (a baseline is also compared with the other baselines).
pub fn attach_ratios(ms: &mut [Measurement]) {
    let baselines: Vec<(Mode, usize, TransportKind, &'static str, f64)> = ms
        .iter()
        .filter(|m| m.transport.is_baseline())
        .filter_map(|m| {
            let (metric, v) = m.headline()?;
            Some((m.mode, m.size, m.transport, metric, v))
        })
        .collect();
    for m in ms.iter_mut() {
        let Some((metric, v)) = m.headline() else {
            continue;
        };
        m.vs = baselines
            .iter()
            .filter(|b| b.0 == m.mode && b.1 == m.size && b.2 != m.transport && b.3 == metric)
            .filter(|b| b.4 > 0.0)
            .map(|b| Ratio {
                baseline: b.2,
                metric: metric.to_string(),
                baseline_value: b.4,
                ratio: v / b.4,
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(t: TransportKind, op: &str, size: usize, ns: u64) -> Measurement {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(ns).unwrap();
        Measurement {
            mode: Mode::Latency,
            transport: t,
            op: op.into(),
            size,
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
            vs: Vec::new(),
            histogram: Some(h),
        }
    }

    #[test]
    fn ratios_pair_results_with_baselines_of_the_same_size() {
        let mut ms = vec![
            lat(TransportKind::Tcp, "message", 64, 20_000),
            lat(TransportKind::Shm, "message", 64, 400),
            lat(TransportKind::Verbs, "write", 64, 4_000),
            lat(TransportKind::Verbs, "write", 4096, 8_000),
        ];
        attach_ratios(&mut ms);
        let w = &ms[2].vs;
        assert_eq!(w.len(), 2);
        let tcp = w.iter().find(|r| r.baseline == TransportKind::Tcp).unwrap();
        assert!((tcp.ratio - 0.2).abs() < 0.01, "{tcp:?}");
        let shm = w.iter().find(|r| r.baseline == TransportKind::Shm).unwrap();
        assert!((shm.ratio - 10.0).abs() < 0.1, "{shm:?}");
        // No baseline at 4 KiB.
        assert!(ms[3].vs.is_empty());
        // Baselines are compared with each other, never with themselves.
        assert_eq!(ms[0].vs.len(), 1);
        assert_eq!(ms[0].vs[0].baseline, TransportKind::Shm);
    }

    #[test]
    fn throughput_counts_bits_and_messages() {
        let t = Throughput::new(1_000_000, 125, 1.0);
        assert_eq!(t.bytes, 125_000_000);
        assert!((t.gbit_per_s - 1.0).abs() < 1e-9);
        assert!((t.mmsg_per_s - 1.0).abs() < 1e-9);
    }

    #[test]
    fn percentiles_are_in_microseconds() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = Percentiles::of(&h);
        assert!((p.min - 1.0).abs() < 0.01);
        assert!((p.p50 - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.max - 1000.0).abs() < 1.0, "{p:?}");
        assert!(p.p99 >= p.p90 && p.p99_9 >= p.p99 && p.p99_99 >= p.p99_9);
    }
}
