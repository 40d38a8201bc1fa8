//! The `iwarpd` binary as a process: refuses a bad configuration naming the key, comes up on
//! the embedded port (answers ARP and TCP from another stack on the segment), writes its
//! counters, and stops cleanly on SIGTERM, removing its runtime files.

use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, Node, TcpSettings};
use iwarpd::port::unix::UnixPort;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_iwarpd");

#[test]
fn bad_configuration_names_the_key() {
    let out = Command::new(BIN).args(["--port", "foo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("port.kind: unknown value \"foo\""), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[tcp]\nmin_rto_us = 0\n").unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcp.min_rto_us"));
}

#[test]
fn runs_serves_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("segment");
    let runtime = dir.path().join("run");
    let mut child = Command::new(BIN)
        .args([
            "--name",
            "left",
            "--mac",
            "02:00:00:00:07:0a",
            "--ip",
            "10.77.7.10/24",
        ])
        .arg("--segment")
        .arg(&seg)
        .arg("--runtime-dir")
        .arg(&runtime)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stats = runtime.join("stats");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !stats.exists() {
        assert!(Instant::now() < deadline, "no stats file");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another stack on the segment: ARP resolves the daemon, its TCP refuses a port nobody
    // listens on (RST), so our connection ends at once.
    let port = UnixPort::open(&seg, [2, 0, 0, 0, 7, 0x0b], 1500).unwrap();
    let mut node = Node::new(
        port,
        Ipv4Addr::new(10, 77, 7, 11),
        24,
        TcpSettings::default(),
    );
    let mut rnic = iwarp_engine::Rnic::new();
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(16);
    let qp = rnic
        .create_qp(
            pd,
            cq,
            cq,
            iwarp_engine::QpCaps {
                sq_depth: 4,
                rq_depth: 4,
                srq: None,
            },
        )
        .unwrap();
    let conn = node
        .connect(
            Ipv4Addr::new(10, 77, 7, 10),
            7174,
            40000,
            qp,
            Settings::default(),
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while node.state(conn) == Some(&ConnState::Connecting) && node.counters().rx_frames < 2 {
        assert!(Instant::now() < deadline, "the daemon did not answer");
        node.poll(&mut rnic);
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(
        node.counters().rx_frames >= 2,
        "ARP reply and RST from the daemon"
    );
    // Its counters move (read while it runs).
    std::thread::sleep(Duration::from_millis(1100));
    let text = std::fs::read_to_string(&stats).unwrap();
    let rx: u64 = text
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("rx_frames="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(rx >= 2, "{text}");
    // SIGTERM: clean exit, runtime files and its segment socket gone.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!runtime.exists(), "runtime dir removed");
    let left: Vec<_> = std::fs::read_dir(&seg)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left.len(),
        2,
        "only our own port's sockets (datagram and listener) remain: {left:?}"
    );
}
