//! The `rping` example against itself on two endpoints of the embedded Unix-socket
//! Ethernet: how it ends when the other side does not do what it asked.

use iwarp_testkit::{self as testkit, Endpoint, Proc};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn endpoint(dir: &Path, name: &str, n: u8, subnet: u8) -> Endpoint {
    Endpoint::start(dir, name, n, subnet, &[])
}

fn rping(runtime: &Path, args: &[&str]) -> std::process::Child {
    let example = testkit::target_dir().join("examples").join("rping");
    assert!(example.exists(), "cargo test builds the examples");
    Command::new(example)
        .args(args)
        .arg("--runtime-dir")
        .arg(runtime)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rping")
}

/// Waits (at most `limit`) for `child` to end; its output.
fn finish(child: std::process::Child, limit: Duration) -> Output {
    let mut p = Proc(child);
    let t = Instant::now();
    while p.0.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < limit, "rping still runs after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Output {
        status: p.0.wait().unwrap(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    use std::io::Read;
    if let Some(mut o) = p.0.stdout.take() {
        o.read_to_end(&mut out.stdout).unwrap();
    }
    if let Some(mut e) = p.0.stderr.take() {
        e.read_to_end(&mut out.stderr).unwrap();
    }
    out
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_server_told_to_expect_more_pings_than_came_fails() {
    let dir = tempfile::tempdir().unwrap();
    let _a = endpoint(dir.path(), "a", 1, 61);
    let _b = endpoint(dir.path(), "b", 2, 61);
    let server = rping(&dir.path().join("b"), &["-s", "-p", "7500", "-C", "3"]);
    let client = rping(
        &dir.path().join("a"),
        &[
            "-c",
            "-a",
            "10.61.0.2",
            "-p",
            "7500",
            "-C",
            "1",
            "-V",
            "--retry",
            "20",
        ],
    );
    let c = finish(client, Duration::from_secs(60));
    assert!(c.status.success(), "client: {}", said(&c));
    assert!(said(&c).contains("rping client: 1 pings"), "{}", said(&c));
    let s = finish(server, Duration::from_secs(60));
    assert!(!s.status.success(), "server exited 0: {}", said(&s));
    assert!(said(&s).contains("after 1 of 3 pings"), "{}", said(&s));
}

#[test]
fn a_refused_connect_ends_the_client_as_rdma_cores_rping_does() {
    let dir = tempfile::tempdir().unwrap();
    let _a = endpoint(dir.path(), "a", 1, 62);
    let _b = endpoint(dir.path(), "b", 2, 62);
    // Nothing listens on endpoint b's port 7501: the SYN is answered with a reset. The
    // client gives up then, well before the 60 s it once kept retrying for.
    let client = rping(
        &dir.path().join("a"),
        &["-c", "-a", "10.62.0.2", "-p", "7501"],
    );
    let c = finish(client, Duration::from_secs(30));
    assert!(!c.status.success(), "{}", said(&c));
    assert!(said(&c).contains("refused"), "{}", said(&c));
}
