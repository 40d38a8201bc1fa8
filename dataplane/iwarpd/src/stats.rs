//! The daemon's stats file, `<runtime dir>/stats`: the counters of each core and the
//! process's memory, rewritten every second for a reader outside the daemon.

use crate::worker::CoreCounters;
use std::path::Path;

/// Writes the stats file atomically (a reader never sees half of it): one line per core,
/// then the process's memory as the kernel counts it (`/proc/self/status`, KiB): resident in
/// all, of it anonymous (heap, stacks) and shared (rings and registered segments in
/// /dev/shm), and hugetlb pages mapped (hugepage segments, DPDK's mempool), which resident
/// memory leaves out.
pub fn write_stats(path: &Path, cores: &[&CoreCounters]) {
    let mut text = String::new();
    for c in cores {
        text.push_str(&c.line());
        text.push('\n');
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
