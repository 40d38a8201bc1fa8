//! What an idle connection costs a real `iwarpd` with its default configuration (1 MiB TCP
//! rings): hundreds of connected, idle QPs between two daemons (each with an
//! `iwarp-control`), the daemons' resident memory (`VmRSS`) read before, while they are held
//! and after they closed. A bound on memory, not a timing: generous, and stable from run to
//! run.

use iwarp_testkit::{self as testkit, Proc};
use iwarp_verbs::{ConnSettings, Context, QpInitAttr};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

/// Idle connections held.
const N: usize = 300;
/// Resident memory one idle connection may cost a daemon, TCP rings included.
const PER_QP: u64 = 64 << 10;
/// How far above its baseline a daemon may stay once every connection closed.
const RETURN_SLACK: u64 = 8 << 20;
const TIMEOUT: Duration = Duration::from_secs(60);
const PORT: u16 = 7400;
/// Open files this process needs: both ends' QPs live here, each with its two ring files
/// (about 1,210 measured for 300 connections), with room to spare.
const OPEN_FILES: u64 = 4 * N as u64 + 256;

/// Resident memory of process `pid`, octets.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib << 10
}

/// The resident memory's parts (anonymous, file, shared), for the log.
fn parts(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("Rss"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Endpoint {
    daemon: Proc,
    _control: Proc,
    ctx: Context,
}

/// The default configuration but for the user timeout: two debug-built daemons sharing two
/// CPUs with other work may leave a poll loop stalled past the default 2 s while hundreds of
/// connections are set up, and an idle connection given up is no measure of its memory.
const CONFIG: &str = "[tcp]\nuser_timeout_ms = 30000\n";

fn start(dir: &Path, name: &str, n: u8) -> Endpoint {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, CONFIG).unwrap();
    let config = config.to_str().unwrap();
    let daemon = testkit::start_daemon(dir, name, n, 24, &["--config", config]);
    let control = testkit::start_control(&dir.join(name));
    let ctx = Context::open(&dir.join(name)).expect("a context on the endpoint");
    Endpoint {
        daemon,
        _control: control,
        ctx,
    }
}

/// Reads both daemons' resident memory until `within` takes it, or the timeout; the last
/// readings either way.
fn settle(a: u32, b: u32, within: impl Fn(u64, u64) -> bool) -> (u64, u64) {
    let t = Instant::now();
    loop {
        let (ra, rb) = (rss(a), rss(b));
        if within(ra, rb) || t.elapsed() > TIMEOUT {
            return (ra, rb);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_idle_connection_costs_at_most_64_kib_and_closing_gives_it_back() {
    let limit = testkit::raise_open_files_limit();
    if limit < OPEN_FILES {
        eprintln!(
            "skipped: needs {OPEN_FILES} open files, and the hard limit (ulimit -Hn) is {limit}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path(), "a", 1);
    let b = start(dir.path(), "b", 2);
    let (pa, pb) = (a.daemon.0.id(), b.daemon.0.id());
    let settings = ConnSettings::default();
    b.ctx.listen(PORT, &settings).unwrap();
    let (pd_a, pd_b) = (a.ctx.alloc_pd().unwrap(), b.ctx.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.ctx.create_cq(256).unwrap(), b.ctx.create_cq(256).unwrap());
    let remote = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 24, 0, 2), PORT));
    let connect = |k: usize| {
        let qa = pd_a.create_qp(&QpInitAttr::new(&cq_a, 16)).unwrap();
        let qb = pd_b.create_qp(&QpInitAttr::new(&cq_b, 16)).unwrap();
        let conn = a.ctx.connect(&qa, remote, &settings).unwrap();
        let req = b
            .ctx
            .get_request(TIMEOUT)
            .unwrap_or_else(|e| panic!("connection {k} at b: {e}"));
        b.ctx
            .accept_blocking(&req, &qb, &settings, TIMEOUT)
            .unwrap_or_else(|e| panic!("connection {k} at b: {e}"));
        a.ctx
            .wait_established(conn, TIMEOUT)
            .unwrap_or_else(|e| panic!("connection {k} at a: {e}"));
        (qa, qb)
    };
    // A few connections opened and closed first, so that what the first ones cost once
    // (the daemons' tables and the allocator's arenas growing) is in the baseline.
    drop((0..8).map(connect).collect::<Vec<_>>());
    let (base_a, base_b) = settle(pa, pb, |_, _| true);
    println!("baseline a: {}; b: {}", parts(pa), parts(pb));

    let held: Vec<_> = (0..N).map(connect).collect();
    // The pages the connections' setup touched are given back once they idle (a daemon
    // looks every second): read until within the bound, or the timeout.
    let bound = PER_QP * N as u64;
    let (ra, rb) = settle(pa, pb, |ra, rb| {
        ra <= base_a + bound && rb <= base_b + bound
    });
    let (per_a, per_b) = (
        ra.saturating_sub(base_a) / N as u64,
        rb.saturating_sub(base_b) / N as u64,
    );
    println!(
        "{N} idle connections: a {} KiB -> {} KiB ({} B each), b {} KiB -> {} KiB ({} B each)",
        base_a >> 10,
        ra >> 10,
        per_a,
        base_b >> 10,
        rb >> 10,
        per_b
    );
    println!("a: {}; b: {}", parts(pa), parts(pb));
    assert!(per_a <= PER_QP, "a: {per_a} B per idle connection");
    assert!(per_b <= PER_QP, "b: {per_b} B per idle connection");

    drop(held);
    let (ea, eb) = settle(pa, pb, |ea, eb| {
        ea <= base_a + RETURN_SLACK && eb <= base_b + RETURN_SLACK
    });
    println!("all closed: a {} KiB, b {} KiB", ea >> 10, eb >> 10);
    assert!(
        ea <= base_a + RETURN_SLACK,
        "a kept {} KiB",
        (ea - base_a) >> 10
    );
    assert!(
        eb <= base_b + RETURN_SLACK,
        "b kept {} KiB",
        (eb - base_b) >> 10
    );
}
