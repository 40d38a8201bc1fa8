//! The harness run briefly, end to end, as people run it: every requested result must carry a
//! histogram (or a message count) of exactly the requested size, the JSON must parse and the
//! histogram log must read back. No test here asserts a time.

use iwarp_bench::output::hlog;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_iwarp-bench");

fn bench(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .output()
        .expect("iwarp-bench starts")
}

fn ok(args: &[&str]) -> Output {
    let out = bench(args);
    assert!(
        out.status.success(),
        "iwarp-bench {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the JSON report exists");
    serde_json::from_str(&text).expect("the JSON report parses")
}

fn measurements(v: &Value) -> &Vec<Value> {
    v["measurements"]
        .as_array()
        .expect("measurements is an array")
}

#[test]
fn every_baseline_result_has_a_histogram_of_the_requested_count() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    let h = dir.path().join("r.hlog");
    let plots = dir.path().join("plots");
    ok(&[
        "--ops",
        "none",
        "--baselines",
        "tcp,shm,shm-proc",
        "--mode",
        "latency,bandwidth,open-loop",
        "--rate",
        "50k",
        "--sizes",
        "8,4K",
        "--iterations",
        "300",
        "--warmup",
        "20",
        "--window",
        "16",
        "--json",
        j.to_str().unwrap(),
        "--hdr-log",
        h.to_str().unwrap(),
        "--plot-dir",
        plots.to_str().unwrap(),
        "--quiet",
    ]);
    let v = json(&j);
    assert_eq!(v["tool"], "iwarp-bench");
    let ms = measurements(&v);
    // 3 modes x 2 sizes x 3 baselines.
    assert_eq!(ms.len(), 18, "{ms:#?}");
    let logged = hlog::read(&h).expect("the histogram log reads back");
    for m in ms {
        let mode = m["mode"].as_str().unwrap();
        assert_eq!(m["count"], 300, "{m}");
        assert_eq!(m["op"], "message");
        match mode {
            "latency" | "open-loop" => {
                let p = &m["latency_us"];
                for k in ["min", "p50", "p90", "p99", "p99.9", "p99.99", "max"] {
                    assert!(p[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {m}");
                }
                assert!(p["p50"].as_f64() <= p["p99.99"].as_f64());
                let tag = m["hdr_tag"].as_str().expect("a histogram tag");
                let (_, hist) = logged
                    .iter()
                    .find(|(t, _)| t == tag)
                    .unwrap_or_else(|| panic!("{tag} missing from the log"));
                assert_eq!(hist.len(), 300, "{tag}");
                // Every result is compared with the two other baselines.
                assert_eq!(m["vs"].as_array().unwrap().len(), 2, "{m}");
            }
            "bandwidth" => {
                let t = &m["throughput"];
                assert_eq!(t["messages"], 300);
                assert!(t["gbit_per_s"].as_f64().is_some_and(|x| x > 0.0), "{m}");
                assert!(m["hdr_tag"].is_null());
            }
            other => panic!("unexpected mode {other}"),
        }
    }
    assert_eq!(logged.len(), 12);
    let files = v["plots"].as_array().unwrap();
    // latency and open-loop per size (4), bandwidth and message rate (2).
    assert_eq!(files.len(), 6, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(f.as_str().unwrap()).unwrap();
        assert!(text.starts_with("<svg"), "{f}");
    }
}

#[test]
fn many_qps_add_up_and_open_loop_counts_every_scheduled_message() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    ok(&[
        "--ops",
        "none",
        "--baselines",
        "tcp,shm",
        "--mode",
        "bandwidth,open-loop",
        "--rate",
        "40k",
        "--qps",
        "3",
        "--sizes",
        "64",
        "--iterations",
        "200",
        "--warmup",
        "10",
        "--json",
        j.to_str().unwrap(),
        "--quiet",
    ]);
    let v = json(&j);
    let ms = measurements(&v);
    assert_eq!(ms.len(), 4);
    for m in ms {
        assert_eq!(m["qps"], 3);
        assert_eq!(m["count"], 600, "{m}");
    }
}

/// `tcp-proc` receives every connection in a process of its own (one epoll loop): each
/// message of each connection arrives and is counted, a ping-pong's are echoed, and no
/// region file is left behind.
#[test]
fn the_tcp_baseline_received_in_another_process_counts_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    let before = region_files();
    ok(&[
        "--ops",
        "none",
        "--baselines",
        "tcp-proc,tcp",
        "--mode",
        "latency,bandwidth",
        "--qps",
        "24",
        "--sizes",
        "1,4K",
        "--iterations",
        "400",
        "--warmup",
        "10",
        "--window",
        "8",
        "--json",
        j.to_str().unwrap(),
        "--quiet",
    ]);
    let v = json(&j);
    let ms = measurements(&v);
    assert_eq!(ms.len(), 8, "{ms:#?}");
    for m in ms.iter().filter(|m| m["transport"] == "tcp-proc") {
        match m["mode"].as_str().unwrap() {
            "latency" => assert_eq!(m["count"], 400, "{m}"),
            _ => {
                assert_eq!(m["qps"], 24);
                assert_eq!(m["throughput"]["messages"], 24 * 400, "{m}");
            }
        }
    }
    assert_eq!(region_files(), before, "a region file was left behind");
}

/// The benchmark's region files in /dev/shm (or none where it has none).
fn region_files() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("iwarp-bench-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_duration_run_measures_something_and_json_can_go_to_stdout() {
    let out = ok(&[
        "--ops",
        "none",
        "--baselines",
        "tcp",
        "--sizes",
        "64",
        "--duration",
        "100ms",
        "--warmup",
        "10",
        "--stages",
        "--json",
        "-",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON report");
    let m = &measurements(&v)[0];
    assert!(m["count"].as_u64().unwrap() > 0);
    assert_eq!(v["settings"]["duration_s"], 0.1);
    // The application-side stages are measured for TCP; the daemon ones do not apply.
    assert!(m["stages"]["post_us"].as_f64().is_some(), "{m}");
    assert!(m["stages"]["wait_us"].as_f64().is_some(), "{m}");
    assert!(m["stages"]["engine_us"].is_null(), "{m}");
}

#[test]
fn the_table_is_printed_with_ratios() {
    let out = ok(&[
        "--ops",
        "none",
        "--sizes",
        "8",
        "--iterations",
        "50",
        "--warmup",
        "5",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("p50 vs tcp") && text.contains("p50 vs shm"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("tcp ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("shm ")), "{text}");
}

fn refused(args: &[&str], needle: &str) {
    let out = bench(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?} was not refused: {err}"
    );
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
}

#[test]
fn nonsense_is_refused_with_a_clear_message() {
    refused(&["--window", "0"], "--window 0");
    refused(&["--ops", "read", "--sizes", "0"], "smallest RDMA Read");
    refused(&["--ops", "fetch-add", "--sizes", "64"], "exactly 8 octets");
    refused(&["--threads", "100000", "--qps", "100000"], "--qps 100000");
    refused(&["--threads", "1000", "--qps", "1000"], "core(s)");
    refused(&["--cores", "0,100000"], "core 100000 does not exist");
    refused(&["--ops", "teleport"], "teleport");
    refused(&["--sizes", "huge"], "huge");
    refused(&["--mode", "open-loop"], "needs --rate");
    refused(&["--daemon-workers", "0"], "1 to 64 workers");
}

#[test]
fn every_iwarp_operation_over_spawned_endpoints_has_its_histogram() {
    // Two endpoints (iwarpd + iwarp-control each) on the embedded Unix-socket Ethernet,
    // started and stopped by the harness; every operation through iwarp-verbs.
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    ok(&[
        "--ops",
        "all",
        "--baselines",
        "none",
        "--mode",
        "latency,bandwidth",
        "--sizes",
        "8,4K",
        "--iterations",
        "50",
        "--warmup",
        "5",
        "--window",
        "8",
        "--json",
        j.to_str().unwrap(),
        "--quiet",
    ]);
    let v = json(&j);
    let ms = measurements(&v);
    let mut seen = std::collections::BTreeSet::new();
    for m in ms {
        assert_eq!(m["transport"], "verbs", "{m}");
        assert_eq!(m["count"], 50, "{m}");
        let op = m["op"].as_str().unwrap().to_string();
        if m["mode"] == "latency" {
            let p50 = m["latency_us"]["p50"].as_f64();
            assert!(p50.is_some_and(|x| x > 0.0), "{m}");
        } else {
            assert_eq!(m["throughput"]["messages"], 50, "{m}");
        }
        seen.insert((m["mode"].as_str().unwrap().to_string(), op));
    }
    for mode in ["latency", "bandwidth"] {
        for op in [
            "send",
            "send-imm",
            "write",
            "write-imm",
            "read",
            "fetch-add",
            "cmp-swap",
        ] {
            assert!(
                seen.contains(&(mode.to_string(), op.to_string())),
                "{mode} {op} missing: {seen:?}"
            );
        }
    }
    // Each spawned daemon's memory, idle and at the end, as iwarpd's stats file gave it.
    let mem = v["daemon_memory"].as_array().expect("daemon_memory");
    let whens: Vec<(String, String)> = mem
        .iter()
        .map(|m| {
            assert!(m["rss_kib"].as_u64().is_some_and(|k| k > 0), "{m}");
            (m["endpoint"].to_string(), m["when"].to_string())
        })
        .collect();
    assert_eq!(whens.len(), 4, "{mem:?}");
}

#[test]
fn setup_rate_holds_what_it_set_up_and_runs_the_kernel_baseline() {
    // The kernel baseline's accepting side is a process of its own (--tcp-accept-peer):
    // the run fails if it does not answer with the count.
    let out = ok(&["--setup-rate", "24", "--hold", "1s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "setup rate, 24 connections",
        "kernel TCP on loopback:",
        "0 of 24 connections lost",
        "KiB per QP",
        "KiB per connection",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn qps_spread_over_the_workers_of_two_worker_daemons() {
    // Each spawned daemon runs two poll-mode workers; the harness opens a context per worker
    // and puts one of the two QPs on each.
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    ok(&[
        "--ops",
        "write,send,read",
        "--baselines",
        "none",
        "--mode",
        "bandwidth",
        "--qps",
        "2",
        "--daemon-workers",
        "2",
        "--sizes",
        "64",
        "--iterations",
        "200",
        "--warmup",
        "10",
        "--window",
        "4",
        "--json",
        j.to_str().unwrap(),
        "--quiet",
    ]);
    let v = json(&j);
    assert_eq!(v["settings"]["endpoint"]["daemon_workers"], 2, "{v}");
    let ms = measurements(&v);
    assert_eq!(ms.len(), 3);
    for m in ms {
        assert_eq!(
            (m["qps"].as_u64(), m["count"].as_u64()),
            (Some(2), Some(400)),
            "{m}"
        );
    }
}

#[test]
fn qps_sharing_send_cqs_each_get_their_own_completions_in_order() {
    // Seven QPs of one context: by default they share send CQs (of one, two and four QPs, as
    // the CQs double), with --cq-per-qp each has its own. Every stream checks that each
    // completion it is handed is its own QP's and its next wr_id (Verbs section 8.2.2, rule
    // 2), so a completion handed to the wrong QP, or out of order, fails the run; every
    // message must be counted exactly once.
    for per_qp in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let j = dir.path().join("r.json");
        let mut args = vec![
            "--ops",
            "write,read,send,fetch-add",
            "--baselines",
            "none",
            "--mode",
            "bandwidth,open-loop",
            "--rate",
            "20k",
            "--qps",
            "7",
            "--sizes",
            "8",
            "--iterations",
            "150",
            "--warmup",
            "10",
            "--window",
            "4",
            "--json",
            j.to_str().unwrap(),
            "--quiet",
        ];
        if per_qp {
            args.push("--cq-per-qp");
        }
        ok(&args);
        let v = json(&j);
        assert_eq!(v["settings"]["cq_per_qp"], per_qp, "{v}");
        let ms = measurements(&v);
        assert_eq!(ms.len(), 8);
        for m in ms {
            assert_eq!(
                (m["qps"].as_u64(), m["count"].as_u64()),
                (Some(7), Some(7 * 150)),
                "{m}"
            );
        }
    }
}

#[test]
fn applications_stream_on_daemons_of_two_workers() {
    // Each `--apps` child opens one context on the running endpoints, and control places it
    // on either worker (with 8, some land on each): every child must run, wherever its
    // context landed.
    let out = ok(&[
        "--apps",
        "8",
        "--daemon-workers",
        "2",
        "--ops",
        "write",
        "--baselines",
        "none",
        "--sizes",
        "4096",
        "--duration",
        "1s",
        "--warmup",
        "1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("8 applications, iwarp: total"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn verbs_operations_without_an_endpoint_fail_cleanly() {
    // Running endpoints named by directories that hold none: a clear error, no hang.
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let out = bench(&[
        "--ops",
        "send",
        "--sizes",
        "8",
        "--iterations",
        "10",
        "--daemons",
        "running",
        "--runtime-dir",
        a.to_str().unwrap(),
        "--runtime-dir",
        b.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no control.sock"), "{err}");
}

#[cfg(feature = "dpdk")]
#[test]
fn every_operation_over_dpdk_memif_daemons_with_jumbo_frames() {
    // Two spawned endpoints whose daemons are joined by net_memif with 9000-octet frames
    // (port.mtu 9000, a memif buffer per frame, TCP segments and FPDUs of 8960): every
    // operation, small and 64 KiB, through iwarp-verbs. Root: hugepages, /var/run.
    if !iwarp_testkit::root_or_skip("every_operation_over_dpdk_memif_daemons_with_jumbo_frames") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("r.json");
    ok(&[
        "--port",
        "dpdk",
        "--dpdk-vdev",
        "net_memif",
        "--mtu",
        "9000",
        "--ops",
        "all",
        "--baselines",
        "none",
        "--mode",
        "latency,bandwidth",
        "--sizes",
        "8,64K",
        "--iterations",
        "30",
        "--warmup",
        "3",
        "--window",
        "8",
        "--json",
        j.to_str().unwrap(),
        "--quiet",
    ]);
    let v = json(&j);
    let ms = measurements(&v);
    // At least the seven operations at 8 B in both modes, and 64 KiB Writes.
    assert!(ms.len() >= 2 * 7, "{ms:?}");
    for m in ms {
        assert_eq!(m["count"], 30, "{m}");
    }
    assert!(
        ms.iter().any(|m| m["size"] == 65536 && m["op"] == "write"),
        "{ms:?}"
    );
}

/// The QPs' registered regions are carved from a few shared buffers, not a buffer (and a
/// descriptor) each: 300 QP pairs run under a limit of 512 descriptors, where a buffer per
/// QP needs 600.
#[test]
fn many_qps_fit_a_small_descriptor_limit() {
    let run = format!(
        "ulimit -n 512 && exec {EXE} --mode bandwidth --ops write --sizes 64 --window 2 \
         --qps 300 --iterations 600 --warmup 10 --baselines none --quiet --json -"
    );
    let out = Command::new("sh")
        .args(["-c", &run])
        .output()
        .expect("sh starts");
    assert!(
        out.status.success(),
        "{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON report");
    let m = &measurements(&v)[0];
    assert_eq!(m["qps"], 300);
}

/// A stream whose endpoint dies under it: the run fails at once and names the cause (the
/// endpoint no longer serves the context), rather than waiting out the runner's stall
/// timeout, which tells only that nothing was delivered.
#[test]
fn a_stream_whose_endpoint_died_fails_naming_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(EXE)
        .args([
            "--mode",
            "bandwidth",
            "--ops",
            "write",
            "--sizes",
            "64",
            "--qps",
            "2",
            "--duration",
            "10m",
            "--baselines",
            "none",
            "--quiet",
            "--runtime-dir",
            dir.path().to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("iwarp-bench starts");
    // Stopped (with its daemons) if the test fails before it ends.
    let mut child = iwarp_testkit::Proc(child);
    // Endpoint a's directory, once its daemon streams: its stats file counts the FPDUs it
    // sent.
    let streaming = |d: &Path| {
        std::fs::read_to_string(d.join("stats")).is_ok_and(|s| {
            s.split_whitespace()
                .find_map(|f| f.strip_prefix("fpdus_tx="))
                .is_some_and(|n| n != "0")
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let a = loop {
        let found = std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|run| {
                std::fs::read_dir(run.path())
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .map(|e| e.path())
            .find(|p| p.is_dir() && p.to_string_lossy().ends_with('a') && streaming(p));
        if let Some(a) = found {
            break a;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stream never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // The initiator's own endpoint: where its peer's endpoint dies, the connection ends and
    // the work requests are flushed; where its own dies, nothing completes.
    let pid: i32 = std::fs::read_to_string(a.join("pid"))
        .expect("iwarpd's pid file")
        .trim()
        .parse()
        .expect("a pid");
    // SAFETY: kill(2) with a pid read from the daemon's own pid file and a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err)
        .expect("iwarp-bench's errors");
    let status = child.0.wait().expect("iwarp-bench ends");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("will never be delivered: iwarp-control closed the context"),
        "{err}"
    );
}
