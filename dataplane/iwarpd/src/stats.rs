//! The daemon's stats file, `<runtime dir>/stats`: the counters of each core and the
//! process's memory, rewritten every second for a reader outside the daemon.

use crate::worker::CoreCounters;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The stats file and what the daemon says about the counters once a second.
pub struct StatsFile {
    path: PathBuf,
    last: Option<Instant>,
    bad_checksums: u64,
}

impl StatsFile {
    pub fn new(path: PathBuf) -> StatsFile {
        StatsFile {
            path,
            last: None,
            bad_checksums: 0,
        }
    }

    /// Called often: once a second, rewrites the file and warns of TCP segments dropped for
    /// a wrong checksum since the last time.
    pub fn tick(&mut self, cores: &[&CoreCounters]) {
        if self
            .last
            .is_some_and(|l| l.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        write_stats(&self.path, cores);
        self.last = Some(Instant::now());
        let now: u64 = cores
            .iter()
            .map(|c| c.bad_checksums.load(Ordering::Relaxed))
            .sum();
        if now > self.bad_checksums {
            tracing::warn!(
                "dropped {} TCP segment(s) with a wrong checksum in the last second ({now} \
                 in all): a peer behind a veth or a VM's virtio device may leave checksums \
                 to an offload that never happens (`ethtool -K IF tx off` on its interface)",
                now - self.bad_checksums
            );
        }
        self.bad_checksums = now;
    }
}

/// What SIGUSR1 logs: `counters: ` and each worker's line, then one `conn core=N ...` line
/// per connection (cwnd, in flight, resends, fast retransmits, RTOs, ECN marks: the stats
/// file's).
pub fn dump_lines(cores: &[&CoreCounters]) -> Vec<String> {
    let mut out: Vec<String> = cores
        .iter()
        .map(|c| format!("counters: {}", c.line()))
        .collect();
    for c in cores {
        out.extend(c.conn_lines().lines().map(str::to_string));
    }
    out
}

/// Writes the stats file atomically (a reader never sees half of it): one line per core,
/// then the process's memory as the kernel counts it (`/proc/self/status`, KiB): resident in
/// all, of it anonymous (heap, stacks) and shared (rings and registered segments in
/// /dev/shm), and hugetlb pages mapped (hugepage segments, DPDK's mempool), which resident
/// memory leaves out.
fn write_stats(path: &Path, cores: &[&CoreCounters]) {
    let mut text = String::new();
    for c in cores {
        text.push_str(&c.line());
        text.push('\n');
    }
    for c in cores {
        text.push_str(&c.conn_lines());
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        text.push_str(&format!(
            "process pid={} rss_kib={} rss_anon_kib={} rss_shmem_kib={} hugetlb_kib={}\n",
            std::process::id(),
            kib("VmRSS:"),
            kib("RssAnon:"),
            kib("RssShmem:"),
            kib("HugetlbPages:"),
        ));
    }
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigusr1_logs_each_worker_then_each_connection() {
        let a = CoreCounters::new(Some(2));
        let b = CoreCounters::new(None);
        a.ecn_marks.store(3, Ordering::Relaxed);
        *a.conns.lock().unwrap() =
            "conn id=1 qp=5 cwnd=14600 ecn_marks=3\nconn id=2 qp=- cwnd=2920 ecn_marks=0\n"
                .to_string();
        *b.conns.lock().unwrap() = "conn id=7 qp=9 cwnd=1460 ecn_marks=1\n".to_string();
        let lines = dump_lines(&[&a, &b]);
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(lines[0].starts_with("counters: core=2 "), "{}", lines[0]);
        assert!(lines[0].contains(" ecn_marks=3"), "{}", lines[0]);
        assert!(lines[1].starts_with("counters: core=- "), "{}", lines[1]);
        assert_eq!(lines[2], "conn core=2 id=1 qp=5 cwnd=14600 ecn_marks=3");
        assert_eq!(lines[3], "conn core=2 id=2 qp=- cwnd=2920 ecn_marks=0");
        assert_eq!(lines[4], "conn core=- id=7 qp=9 cwnd=1460 ecn_marks=1");
    }
}
