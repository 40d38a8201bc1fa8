//! Many established, idle connections between two nodes on the embedded Unix-socket
//! Ethernet stay up while a burst of new setups loads both poll loops, and while both loops
//! stall for longer than the user timeout: a peer is declared dead for its own silence,
//! never for ours. A thousand setups started at once all complete.

mod common;

use common::{poll_for, segment_dir, End, A_IP, B_IP};
use iwarp_engine::{QpCaps, QpState};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, TcpSettings};
use iwarpd::port::unix::UnixPort;
use std::time::{Duration, Instant};

/// Held by each test for its whole run: the tests poll hundreds of connections in one
/// thread each and would otherwise share the machine's cores with each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Connections opened first and then left idle.
const IDLE: usize = 400;
/// Connections opened in a burst while the first ones idle.
const BURST: usize = 200;

/// A QP with small queues, so hundreds fit in a test's memory.
fn qp(end: &mut End<UnixPort>) -> iwarp_engine::QpId {
    let caps = QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    end.rnic.create_qp(end.pd, end.cq, end.cq, caps).unwrap()
}

/// A connection: its index on A and on B, and its QP on A and on B.
type Pair = (usize, usize, iwarp_engine::QpId, iwarp_engine::QpId);

/// Opens connections `range` (B connects to A, one listening port each).
fn open(a: &mut End<UnixPort>, b: &mut End<UnixPort>, range: std::ops::Range<usize>) -> Vec<Pair> {
    range
        .map(|i| {
            let (qa, qb) = (qp(a), qp(b));
            let port = 10_000 + i as u16;
            let ca = a.node.listen(port, qa, Settings::default()).unwrap();
            let cb = b
                .node
                .connect(A_IP, port, 40_000 + i as u16, qb, Settings::default())
                .unwrap();
            (ca, cb, qa, qb)
        })
        .collect()
}

/// Opens connections `range`, all at once, and waits until every one is up.
fn open_all(
    a: &mut End<UnixPort>,
    b: &mut End<UnixPort>,
    range: std::ops::Range<usize>,
) -> Vec<Pair> {
    let conns = open(a, b, range);
    wait_rts(a, b, &conns);
    conns
}

fn all_rts(a: &End<UnixPort>, b: &End<UnixPort>, conns: &[Pair]) -> bool {
    conns.iter().all(|&(ca, cb, _, _)| {
        a.node.state(ca) == Some(&ConnState::Rts) && b.node.state(cb) == Some(&ConnState::Rts)
    })
}

/// Polls both nodes until every connection of `conns` is in RTS; a connection that fails
/// fails the test at once.
fn wait_rts(a: &mut End<UnixPort>, b: &mut End<UnixPort>, conns: &[Pair]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !all_rts(a, b, conns) {
        for &(ca, cb, _, _) in conns {
            let (sa, sb) = (a.node.state(ca), b.node.state(cb));
            assert!(
                ![sa, sb]
                    .iter()
                    .any(|s| matches!(s, Some(ConnState::Failed(_) | ConnState::Closed))),
                "setup {ca}/{cb} failed: {sa:?} / {sb:?}; {:?} {:?}",
                a.node.counters(),
                b.node.counters()
            );
        }
        assert!(Instant::now() < deadline, "setups did not finish");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
}

fn check_all_up(a: &End<UnixPort>, b: &End<UnixPort>, conns: &[Pair], when: &str) {
    let down = conns
        .iter()
        .filter(|&&(ca, cb, _, _)| {
            a.node.state(ca) != Some(&ConnState::Rts) || b.node.state(cb) != Some(&ConnState::Rts)
        })
        .count();
    assert_eq!(
        down,
        0,
        "{when}: {down} of {} connections lost",
        conns.len()
    );
    for &(_, _, qa, qb) in conns {
        assert_eq!(a.rnic.qp_state(qa), Some(QpState::Rts), "{when}");
        assert_eq!(b.rnic.qp_state(qb), Some(QpState::Rts), "{when}");
    }
    assert_eq!(a.node.counters().conns_lost, 0, "{when}");
    assert_eq!(b.node.counters().conns_lost, 0, "{when}");
}

#[test]
fn idle_connections_survive_a_setup_burst_and_a_stalled_loop() {
    let _alone = alone();
    let dir = segment_dir("iwarp-storm");
    // The daemon's default user timeout (2 s) and keep-alive (a quarter of it); small
    // buffers so that hundreds of connections fit in a test's memory.
    let tcp = TcpSettings {
        rx_buffer: 16 << 10,
        tx_buffer: 16 << 10,
        ..TcpSettings::default()
    };
    let mut a = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 4, 0x0a], 1500).unwrap(),
        A_IP,
        tcp,
    );
    let mut b = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 4, 0x0b], 1500).unwrap(),
        B_IP,
        tcp,
    );
    let idle = open_all(&mut a, &mut b, 0..IDLE);

    // A burst of setups while the first connections idle, then more than a user timeout
    // of idling with both loops running.
    let burst = open_all(&mut a, &mut b, IDLE..IDLE + BURST);
    poll_for(&mut a, &mut b, tcp.user_timeout * 2);
    let every: Vec<_> = idle.iter().chain(&burst).copied().collect();
    check_all_up(&a, &b, &every, "after the burst");

    // Both loops stall past the user timeout (a turn that takes that long: no probe goes
    // out, no answer is read). The time we were away is not the peers' silence.
    std::thread::sleep(tcp.user_timeout * 3 / 2);
    poll_for(&mut a, &mut b, tcp.user_timeout * 2);
    check_all_up(&a, &b, &every, "after the stall");
}

/// Setups started in one burst, each with its own listener.
const AT_ONCE: usize = 1000;

#[test]
fn a_thousand_setups_started_at_once_all_succeed() {
    let _alone = alone();
    let dir = segment_dir("iwarp-storm-once");
    let tcp = TcpSettings {
        rx_buffer: 16 << 10,
        tx_buffer: 16 << 10,
        ..TcpSettings::default()
    };
    let mut a = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 6, 0x0a], 1500).unwrap(),
        A_IP,
        tcp,
    );
    let mut b = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 6, 0x0b], 1500).unwrap(),
        B_IP,
        tcp,
    );
    // Each setup's timeout counts from its own first segment, and the last of them waits
    // behind all the others in both poll loops.
    let conns = open_all(&mut a, &mut b, 0..AT_ONCE);
    check_all_up(&a, &b, &conns, "after the burst");
}

#[test]
fn a_silent_peer_is_still_given_up() {
    let _alone = alone();
    let dir = segment_dir("iwarp-storm-dead");
    let tcp = TcpSettings {
        user_timeout: Duration::from_millis(500),
        ..TcpSettings::default()
    };
    let mut a = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 5, 0x0a], 1500).unwrap(),
        A_IP,
        tcp,
    );
    let mut b = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 5, 0x0b], 1500).unwrap(),
        B_IP,
        tcp,
    );
    let conns = open(&mut a, &mut b, 0..4);
    wait_rts(&mut a, &mut b, &conns);
    // B stops: A's probes go unanswered, and A alone keeps polling.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(30);
    while conns
        .iter()
        .any(|&(ca, _, _, _)| a.node.state(ca) == Some(&ConnState::Rts))
    {
        assert!(Instant::now() < deadline, "a dead peer was never given up");
        a.node.poll(&mut a.rnic);
    }
    for &(_, _, q, _) in &conns {
        assert_eq!(a.rnic.qp_state(q), Some(QpState::Error));
    }
    assert_eq!(a.node.counters().conns_lost, conns.len() as u64);
}
