//! The `iwarpd` binary as a process: a bad configuration is refused naming the key; a
//! running daemon answers on the embedded Unix-socket segment, publishes its counters while
//! it runs, dumps them on SIGUSR1, and leaves nothing behind on SIGTERM.

use iwarpd::port::unix::UnixPort;
use iwarpd::port::Port;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_iwarpd");

fn refused(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run iwarpd");
    assert_eq!(out.status.code(), Some(2), "exit status for {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_configuration_is_refused_naming_the_key() {
    let e = refused(&["--port", "foo"]);
    assert!(
        e.contains("port.kind: unknown value \"foo\", expected one of \"unix\", \"tap\", \"dpdk\""),
        "{e}"
    );
    let e = refused(&["--ip", "10.0.0.1"]);
    assert!(e.contains("port.ipv4"), "{e}");
    let e = refused(&["--polling", "lazy"]);
    assert!(e.contains("cores.polling"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[tcp]\nmss = 100\n").unwrap();
    let e = refused(&["--config", file.to_str().unwrap()]);
    assert!(e.contains("tcp.mss"), "{e}");
    std::fs::write(&file, "[tcp]\nmystery = 1\n").unwrap();
    let e = refused(&["--config", file.to_str().unwrap()]);
    assert!(e.contains("mystery"), "{e}");
}

const DAEMON_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x02];
const PROBE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x01];

/// An ARP request for 10.77.0.2 from the probe (RFC 826 layout).
fn arp_request() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&PROBE_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&PROBE_MAC);
    f.extend_from_slice(&[10, 77, 0, 1]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 77, 0, 2]);
    f
}

fn is_arp_reply_from_daemon(f: &[u8]) -> bool {
    f.len() >= 42
        && f[12..14] == [0x08, 0x06]
        && f[20..22] == [0, 2]
        && f[22..28] == DAEMON_MAC
        && f[28..32] == [10, 77, 0, 2]
        && f[0..6] == PROBE_MAC
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stat(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    iwarp_testkit::stat(&text, key).unwrap_or(0)
}

#[test]
fn the_daemon_answers_counts_and_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join("segment");
    let runtime = dir.path().join("run");
    let pcap = dir.path().join("d.pcap");
    std::fs::create_dir_all(&segment).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "--name",
            "t0",
            "--mac",
            "02:00:00:00:77:02",
            "--ip",
            "10.77.0.2/24",
        ])
        .arg("--segment")
        .arg(&segment)
        .arg("--runtime-dir")
        .arg(&runtime)
        .arg("--pcap")
        .arg(&pcap)
        .args(["--polling", "adaptive", "--log-level", "debug"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start iwarpd");
    let stats = runtime.join("stats");
    wait_for("the stats file", Duration::from_secs(20), || stats.exists());
    assert!(runtime.join("pid").exists());
    // The daemon segment (rings, heartbeat) exists, linked from the runtime dir.
    let seg_file = iwarp_abi::segment::Segment::find("iwarp-t0.daemon").expect("daemon segment");
    assert_eq!(
        std::fs::canonicalize(runtime.join("daemon.shm")).unwrap(),
        std::fs::canonicalize(&seg_file).unwrap()
    );

    // Control's view: the daemon's pid, and a heartbeat that moves while its core polls.
    let ctl = iwarp_abi::daemon_shm::DaemonShm::open(&runtime.join("daemon.shm"), 1).unwrap();
    assert_eq!(ctl.daemon_pid(), child.id());
    let h0 = ctl.heartbeat(0);
    wait_for("the heartbeat", Duration::from_secs(10), || {
        ctl.heartbeat(0) > h0
    });

    // A second daemon on the same runtime dir is refused.
    let out = Command::new(BIN)
        .args([
            "--name",
            "t0",
            "--mac",
            "02:00:00:00:77:03",
            "--ip",
            "10.77.0.3/24",
        ])
        .arg("--segment")
        .arg(&segment)
        .arg("--runtime-dir")
        .arg(&runtime)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already runs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The daemon's ARP answers a probe on the segment.
    let mut probe = UnixPort::open(&segment, PROBE_MAC, 1500).unwrap();
    let mut answered = false;
    let t = Instant::now();
    while !answered && t.elapsed() < Duration::from_secs(20) {
        probe.tx(&arp_request()).unwrap();
        probe.flush().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        probe
            .rx_burst(32, |f| answered |= is_arp_reply_from_daemon(&f))
            .unwrap();
    }
    assert!(answered, "no ARP reply from the daemon");
    // Its counters move while it runs.
    wait_for("counters", Duration::from_secs(10), || {
        stat(&stats, "rx_frames") >= 1 && stat(&stats, "tx_frames") >= 1
    });

    // SIGUSR1 dumps the counters and the daemon keeps running.
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "SIGUSR1 stopped it");

    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {log}", out.status);
    assert!(
        log.contains("SIGUSR1 counters: core="),
        "no SIGUSR1 dump in: {log}"
    );
    assert!(!runtime.exists(), "runtime dir left behind");
    assert!(
        !seg_file.exists(),
        "shared memory left behind: {}",
        seg_file.display()
    );
    let left: Vec<_> = std::fs::read_dir(&segment)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left.len(),
        2,
        "only the probe's sockets (datagram and listener) may remain: {left:?}"
    );
    // The capture holds the ARP exchange: a pcap header and at least two records.
    let cap = std::fs::read(&pcap).unwrap();
    assert!(
        cap.len() >= 24 + 2 * (16 + 42),
        "capture too short: {}",
        cap.len()
    );
    drop(probe);
}

#[test]
fn a_busy_daemon_names_its_stage_times_before_any_work() {
    // A reader compares two readings of the stage times (iwarp-bench's --stages): the first
    // is taken before any traffic, and must already name each stage, at zero.
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join("segment");
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(&segment).unwrap();
    let mut child = Command::new(BIN)
        .args(["--name", "t1", "--mac", "02:00:00:00:77:04"])
        .args([
            "--ip",
            "10.77.0.4/24",
            "--polling",
            "busy",
            "--stage-timing",
        ])
        .arg("--segment")
        .arg(&segment)
        .arg("--runtime-dir")
        .arg(&runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start iwarpd");
    let stats = runtime.join("stats");
    // Written once the worker has polled (the file is rewritten every second).
    wait_for("the worker's polls", Duration::from_secs(20), || {
        stat(&stats, "polls") > 0
    });
    let text = std::fs::read_to_string(&stats).unwrap_or_default();
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    for key in [
        "stage_port_ns",
        "stage_tcp_ns",
        "stage_engine_ns",
        "stage_ring_ns",
    ] {
        assert!(text.contains(&format!("{key}=")), "no {key} in: {text}");
    }
}
