//! The per-stage breakdown: where the time of one exchange goes.
//!
//! Two stages are timed by the harness itself in the application thread (with `--stages`,
//! since the clock reads cost tens of nanoseconds on the measured path):
//! - `post`: handing the message to the transport (a WQE written into the SQ ring and its
//!   doorbell; the `write` system call for kernel TCP; the payload copy for shared memory);
//! - `wait`: from then until the answer is back (polling the CQ; `read` for TCP).
//!
//! The daemon-side stages (`ring`: WQE fetch and CQE write, `engine`: the RNIC engine, `tcp`:
//! smoltcp, `port`: frame I/O) come from iwarpd's per-core stats file
//! (`<runtime dir>/stats`), when it publishes the cumulative nanosecond counters
//! `stage_ring_ns`, `stage_engine_ns`, `stage_tcp_ns` and `stage_port_ns`: the harness takes
//! their growth over a measurement and divides by the exchanges measured. A field that cannot
//! be measured is `null` in the JSON, never a guess.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// What `parse` finds in `<runtime dir>/stats` once the file was written at `written_after`
/// or later, when that is given: iwarpd rewrites it every second, so a reading taken right
/// after a short measurement would otherwise miss it. Waits up to three seconds.
fn read_stats<T>(
    runtime_dir: &Path,
    written_after: Option<std::time::SystemTime>,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let path = runtime_dir.join("stats");
    loop {
        let fresh = written_after.is_none_or(|after| {
            std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= after)
        });
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let (true, Some(v)) = (fresh, parse(&text)) {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Nanoseconds accumulated by a transport over `exchanges` exchanges.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StageTimes {
    pub post_ns: u64,
    pub wait_ns: u64,
    pub exchanges: u64,
}

impl StageTimes {
    pub fn add(&mut self, post_ns: u64, wait_ns: u64) {
        self.post_ns += post_ns;
        self.wait_ns += wait_ns;
        self.exchanges += 1;
    }
}

/// The cumulative daemon stage counters of one daemon, summed over its cores.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DaemonStages {
    pub ring_ns: Option<u64>,
    pub engine_ns: Option<u64>,
    pub tcp_ns: Option<u64>,
    pub port_ns: Option<u64>,
}

impl DaemonStages {
    /// Parses iwarpd's stats file text (one line per core of `key=value` pairs); a counter is
    /// present when any core line carries it.
    pub fn parse(text: &str) -> DaemonStages {
        let mut d = DaemonStages::default();
        for line in text.lines() {
            for pair in line.split_whitespace() {
                let Some((k, v)) = pair.split_once('=') else {
                    continue;
                };
                let Ok(v) = v.parse::<u64>() else { continue };
                let slot = match k {
                    "stage_ring_ns" => &mut d.ring_ns,
                    "stage_engine_ns" => &mut d.engine_ns,
                    "stage_tcp_ns" => &mut d.tcp_ns,
                    "stage_port_ns" => &mut d.port_ns,
                    _ => continue,
                };
                *slot = Some(slot.unwrap_or(0) + v);
            }
        }
        d
    }

    /// Reads `<runtime dir>/stats` as rewritten at `written_after` or later (see
    /// `read_stats`); an absent or unreadable file gives all-`None`.
    pub fn read(runtime_dir: &Path, written_after: std::time::SystemTime) -> DaemonStages {
        read_stats(runtime_dir, Some(written_after), |t| {
            Some(DaemonStages::parse(t))
        })
        .unwrap_or_default()
    }

    /// Growth from `earlier` to `self`, counter by counter.
    pub fn since(&self, earlier: &DaemonStages) -> DaemonStages {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        DaemonStages {
            ring_ns: d(self.ring_ns, earlier.ring_ns),
            engine_ns: d(self.engine_ns, earlier.engine_ns),
            tcp_ns: d(self.tcp_ns, earlier.tcp_ns),
            port_ns: d(self.port_ns, earlier.port_ns),
        }
    }

    /// Sums two daemons' counters (both endpoints of an exchange).
    pub fn plus(&self, o: &DaemonStages) -> DaemonStages {
        let s = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        DaemonStages {
            ring_ns: s(self.ring_ns, o.ring_ns),
            engine_ns: s(self.engine_ns, o.engine_ns),
            tcp_ns: s(self.tcp_ns, o.tcp_ns),
            port_ns: s(self.port_ns, o.port_ns),
        }
    }
}

/// The breakdown as reported: mean microseconds per exchange, `null` where not measured.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    pub post_us: Option<f64>,
    pub wait_us: Option<f64>,
    pub ring_us: Option<f64>,
    pub engine_us: Option<f64>,
    pub tcp_us: Option<f64>,
    pub port_us: Option<f64>,
}

impl Stages {
    pub fn from_parts(app: StageTimes, daemon: DaemonStages, exchanges: u64) -> Stages {
        let per = |ns: u64, n: u64| (n > 0).then(|| ns as f64 / n as f64 / 1e3);
        Stages {
            post_us: per(app.post_ns, app.exchanges),
            wait_us: per(app.wait_ns, app.exchanges),
            ring_us: daemon.ring_ns.and_then(|v| per(v, exchanges)),
            engine_us: daemon.engine_ns.and_then(|v| per(v, exchanges)),
            tcp_us: daemon.tcp_ns.and_then(|v| per(v, exchanges)),
            port_us: daemon.port_ns.and_then(|v| per(v, exchanges)),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Stages::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_counters_sum_over_cores_and_absent_ones_stay_none() {
        let t = "core=0 rx_frames=5 stage_ring_ns=100 stage_tcp_ns=7\n\
                 core=1 stage_ring_ns=50 junk stage_engine_ns=x\n";
        let d = DaemonStages::parse(t);
        assert_eq!(d.ring_ns, Some(150));
        assert_eq!(d.tcp_ns, Some(7));
        assert_eq!(d.engine_ns, None);
        assert_eq!(d.port_ns, None);
        let later = DaemonStages::parse("stage_ring_ns=400 stage_tcp_ns=9");
        let g = later.since(&d);
        assert_eq!(g.ring_ns, Some(250));
        assert_eq!(g.tcp_ns, Some(2));
        let s = Stages::from_parts(StageTimes::default(), g, 10);
        assert_eq!(s.ring_us, Some(0.025));
        assert_eq!(s.post_us, None);
        assert_eq!(s.engine_us, None);
    }

    #[test]
    fn app_stage_means_divide_by_exchanges() {
        let mut t = StageTimes::default();
        t.add(1000, 3000);
        t.add(3000, 5000);
        let s = Stages::from_parts(t, DaemonStages::default(), 2);
        assert_eq!(s.post_us, Some(2.0));
        assert_eq!(s.wait_us, Some(4.0));
        assert!(!s.is_empty());
        assert!(Stages::default().is_empty());
    }
}

/// A daemon's memory as the kernel counts it, from the `process` line of its stats file
/// (KiB): resident in all, anonymous (heap, stacks), shared (rings and registered segments
/// in /dev/shm), and hugetlb pages mapped (hugepage segments, DPDK's mempool; not resident
/// memory as VmRSS counts it).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonMemory {
    /// The endpoint (`a` or `b`) and when: `idle` (started, no application yet) or `end`.
    pub endpoint: String,
    pub when: String,
    pub rss_kib: u64,
    pub anon_kib: u64,
    pub shmem_kib: u64,
    pub hugetlb_kib: u64,
}

impl DaemonMemory {
    /// The `process` line of iwarpd's stats text, if it has one.
    pub fn parse(text: &str, endpoint: &str, when: &str) -> Option<DaemonMemory> {
        let line = text.lines().find(|l| l.starts_with("process "))?;
        let get = |key: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
        };
        Some(DaemonMemory {
            endpoint: endpoint.into(),
            when: when.into(),
            rss_kib: get("rss_kib")?,
            anon_kib: get("rss_anon_kib")?,
            shmem_kib: get("rss_shmem_kib")?,
            hugetlb_kib: get("hugetlb_kib")?,
        })
    }

    /// Reads `<runtime dir>/stats` (see `read_stats`) for its `process` line.
    pub fn read(
        runtime_dir: &Path,
        endpoint: &str,
        when: &str,
        written_after: Option<std::time::SystemTime>,
    ) -> Option<DaemonMemory> {
        read_stats(runtime_dir, written_after, |t| {
            DaemonMemory::parse(t, endpoint, when)
        })
    }

    /// One line for the terminal.
    pub fn describe(&self) -> String {
        let mib = |k: u64| k as f64 / 1024.0;
        format!(
            "iwarpd {} {}: resident {:.1} MiB (anonymous {:.1}, shared {:.1}), hugetlb {:.1} MiB",
            self.endpoint,
            self.when,
            mib(self.rss_kib),
            mib(self.anon_kib),
            mib(self.shmem_kib),
            mib(self.hugetlb_kib)
        )
    }
}

#[cfg(test)]
mod memory_tests {
    use super::DaemonMemory;

    #[test]
    fn the_process_line_of_the_stats_file_is_read_and_other_lines_ignored() {
        let text = "core=- rx_frames=1 polls=3\n\
                    process pid=7 rss_kib=9000 rss_anon_kib=2000 rss_shmem_kib=6000 hugetlb_kib=4096\n";
        let m = DaemonMemory::parse(text, "a", "idle").unwrap();
        assert_eq!(
            (m.rss_kib, m.anon_kib, m.shmem_kib, m.hugetlb_kib),
            (9000, 2000, 6000, 4096)
        );
        assert!(m.describe().contains("resident 8.8 MiB"));
        assert_eq!(DaemonMemory::parse("core=- polls=3\n", "a", "idle"), None);
        assert_eq!(
            DaemonMemory::parse("process pid=7 rss_kib=x\n", "a", "idle"),
            None
        );
    }
}
