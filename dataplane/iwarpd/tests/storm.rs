//! Many established, idle connections between two nodes on the embedded Unix-socket
//! Ethernet stay up while a burst of new setups loads both poll loops, and while both loops
//! stall for longer than the user timeout: a peer is declared dead for its own silence,
//! never for ours.

mod common;

use common::{segment_dir, End, A_IP, B_IP};
use iwarp_engine::{QpCaps, QpState};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, TcpSettings};
use iwarpd::port::unix::UnixPort;
use std::time::{Duration, Instant};

/// Connections opened first and then left idle.
const IDLE: usize = 400;
/// Connections opened in a burst while the first ones idle.
const BURST: usize = 200;
/// Setups started at once. Both nodes poll in one thread here, and a few hundred SYNs and
/// MPA Requests at once overflow the Unix socket's queue; recovering from that within the
/// user timeout is a matter of its own.
const WAVE: usize = 50;

/// A QP with small queues, so hundreds fit in a test's memory.
fn qp(end: &mut End<UnixPort>) -> u32 {
    let caps = QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    end.rnic.create_qp(end.pd, end.cq, end.cq, caps).unwrap()
}

/// A connection: its index on A and on B, and its QP on A and on B.
type Pair = (usize, usize, u32, u32);

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

/// Opens connections `range` [`WAVE`] at a time, each wave up before the next starts.
fn open_waves(
    a: &mut End<UnixPort>,
    b: &mut End<UnixPort>,
    range: std::ops::Range<usize>,
) -> Vec<Pair> {
    let mut all = Vec::new();
    for start in range.clone().step_by(WAVE) {
        let wave = open(a, b, start..(start + WAVE).min(range.end));
        wait_rts(a, b, &wave);
        all.extend(wave);
    }
    all
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

/// Polls both nodes for `d` of real time.
fn poll_for(a: &mut End<UnixPort>, b: &mut End<UnixPort>, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
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
    let idle = open_waves(&mut a, &mut b, 0..IDLE);

    // A burst of setups while the first connections idle, then more than a user timeout
    // of idling with both loops running.
    let burst = open_waves(&mut a, &mut b, IDLE..IDLE + BURST);
    poll_for(&mut a, &mut b, tcp.user_timeout * 2);
    let every: Vec<_> = idle.iter().chain(&burst).copied().collect();
    check_all_up(&a, &b, &every, "after the burst");

    // Both loops stall past the user timeout (a turn that takes that long: no probe goes
    // out, no answer is read). The time we were away is not the peers' silence.
    std::thread::sleep(tcp.user_timeout * 3 / 2);
    poll_for(&mut a, &mut b, tcp.user_timeout * 2);
    check_all_up(&a, &b, &every, "after the stall");
}

#[test]
fn a_silent_peer_is_still_given_up() {
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
