//! The `node-pair` example run briefly, as people run it: each mode makes a measurement and
//! prints it. No test here asserts a time.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The example's executable, built once per test process with this test's profile and
/// features (`cargo test` builds examples already; a filtered run such as `--test node_pair`
/// does not).
fn example() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let mut build = escargot::CargoBuild::new()
            .package("iwarpd")
            .example("node-pair")
            .current_release()
            .current_target();
        if cfg!(feature = "dpdk") {
            build = build.features("dpdk");
        }
        build
            .run()
            .expect("the node-pair example builds")
            .path()
            .to_path_buf()
    })
}

/// node-pair's output for `args`; it must succeed.
fn node_pair(args: &[&str]) -> String {
    let out = Command::new(example()).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The status names a signal too: a run that printed its whole measurement and then
    // died at exit says so.
    assert!(
        out.status.success(),
        "node-pair {args:?}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The p50 of the row starting `row` (the first number after its name).
fn p50_of(text: &str, row: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(row))
        .unwrap_or_else(|| panic!("no {row} row in {text}"));
    line[row.len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// The number just before `unit` in `text`.
fn number_before(text: &str, unit: &str) -> f64 {
    text.split(unit)
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {unit:?} in {text}"))
}

#[test]
fn node_pair_measures_the_frame_path() {
    // Two nodes on one thread over an in-memory link: the round trip and one hop, as
    // percentiles (no time is asserted, only that a measurement was made and printed).
    // Then with the work going through the application rings and the daemon's fast path.
    for rings in [false, true] {
        let mut args = vec!["latency", "--iterations", "2000"];
        if rings {
            args.push("--rings");
        }
        let text = node_pair(&args);
        assert!(text.contains("2000 round trips"), "{text}");
        let via = if rings {
            "through the application rings"
        } else {
            "straight to the engine"
        };
        assert!(text.contains(via), "{text}");
        for row in ["round trip", "one hop"] {
            assert!(p50_of(&text, row) > 0.0, "{text}");
        }
    }
}

/// The per-core busy shares a two-thread rate run prints, sender first.
fn busy_shares(text: &str) -> (f64, f64) {
    let line = text
        .lines()
        .find(|l| l.contains("sender core"))
        .unwrap_or_else(|| panic!("no busy line in {text}"));
    let share = |who: &str| number_before(line.split(who).nth(1).unwrap_or(""), " %");
    (share("sender core "), share("receiver core "))
}

#[test]
fn node_pair_measures_the_rate_of_each_operation() {
    // Many messages in flight through the frame path, both nodes on one thread and then a
    // pinned thread each: a rate is printed, and the 64 B Sends went several to a TCP
    // segment (fewer frames than messages). With two threads each core's busy share is a
    // percentage. No time is asserted.
    // The one-thread runs go through the application rings too (every Send's receive
    // posted, every completion reaped through them; a stalled path ends the run in error).
    for (op, unit) in [("sends", " M msg/s"), ("writes", " Gbit/s")] {
        for (threads, rings) in [("1", false), ("1", true), ("2", false)] {
            let mut args = vec!["rate", "--op", op, "--seconds", "0.2", "--threads", threads];
            if rings {
                args.push("--rings");
            }
            let text = node_pair(&args);
            assert_eq!(
                text.contains("through the application rings"),
                rings,
                "{text}"
            );
            assert!(number_before(&text, unit) > 0.0, "{text}");
            if op == "sends" {
                let frames = number_before(&text, " frames");
                assert!(frames < 0.5, "64 B Sends not packed: {text}");
            }
            if threads == "2" {
                let (sender, receiver) = busy_shares(&text);
                assert!(sender > 0.0 && sender <= 100.0, "{text}");
                assert!(receiver > 0.0 && receiver <= 100.0, "{text}");
            } else {
                assert!(!text.contains("sender core"), "{text}");
            }
        }
    }
}

#[test]
fn node_pair_measures_many_qps_all_streaming() {
    // 64 QP pairs, every one keeping four 64 B Writes in flight, both nodes on one thread:
    // a rate is printed, the small Writes went several to a segment, and each data
    // segment was acknowledged at most once. No time is asserted.
    let text = node_pair(&["streams", "--qps", "64", "--seconds", "0.3"]);
    assert!(number_before(&text, " M writes/s") > 0.0, "{text}");
    let sent = number_before(&text, " frames and");
    assert!(sent > 0.0 && sent < 0.5, "64 B Writes not packed: {text}");
    let fpdus = number_before(&text, " FPDUs");
    assert!((fpdus - 1.0).abs() < 0.01, "an FPDU per 64 B Write: {text}");
    assert!(number_before(&text, " frames back") <= sent, "{text}");
    // 64 KiB Writes on 8 pairs, the bandwidth printed.
    let text = node_pair(&[
        "streams",
        "--qps",
        "8",
        "--size",
        "65536",
        "--window",
        "8",
        "--seconds",
        "0.3",
    ]);
    assert!(number_before(&text, " Gbit/s") > 0.0, "{text}");
}

#[cfg(feature = "dpdk")]
#[test]
fn node_pair_runs_over_dpdk_memif_on_two_pinned_threads() {
    // The frame path of two nodes joined by net_memif, a busy-polling thread each: a
    // measurement is made and printed (no time is asserted). Root: hugepages, /var/run.
    if !iwarp_testkit::root_or_skip("node_pair_runs_over_dpdk_memif_on_two_pinned_threads") {
        return;
    }
    let args = [
        "latency",
        "--link",
        "memif",
        "--threads",
        "2",
        "--iterations",
        "2000",
    ];
    let text = node_pair(&args);
    assert!(text.contains("DPDK net_memif"), "{text}");
    assert!(text.contains("cores 0 and 1"), "{text}");
    assert!(p50_of(&text, "one hop") > 0.0, "{text}");
    // And a stream of 64 B Sends, each end on its core.
    let args = [
        "rate",
        "--link",
        "memif",
        "--threads",
        "2",
        "--seconds",
        "0.3",
    ];
    let text = node_pair(&args);
    assert!(text.contains("DPDK net_memif"), "{text}");
    assert!(number_before(&text, " M msg/s") > 0.0, "{text}");
    let (sender, receiver) = busy_shares(&text);
    assert!(sender > 0.0 && receiver > 0.0, "{text}");
}
