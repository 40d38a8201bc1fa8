//! A turn visits the connections that have work, not every connection: with 128 connected
//! QPs per node, 127 of them idle, a stream of Writes on one QP visits that QP's connection
//! alone, and idle turns visit none. TCP's work follows too: smoltcp is handed the sockets of
//! the active connection's shard, never all 128. And a turn visits 1,024 connections at
//! most: with more at work, the rest go next turn.

mod common;

use common::{End, A_IP, B_IP};
use iwarp_engine::{Access, QpCaps, SendOp, SendWr, Status};
use iwarpd::node::TcpSettings;
use iwarpd::port::memory::MemoryPort;
use std::time::{Duration, Instant};

/// Polls both nodes until they settle: 20 turns in a row in which neither received anything
/// (the last delayed ACKs of the setup are in).
fn settle(a: &mut End<MemoryPort>, b: &mut End<MemoryPort>, deadline: Instant) {
    let mut quiet = 0;
    while quiet < 20 {
        assert!(Instant::now() < deadline, "settling");
        let busy = a.node.poll(&mut a.rnic) | b.node.poll(&mut b.rnic);
        quiet = if busy { 0 } else { quiet + 1 };
    }
}

const QPS: usize = 128;
const WRITES: u64 = 50;

#[test]
fn a_turn_visits_only_the_connections_with_work() {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 0x22, 1], [2, 0, 0, 0, 0x22, 2], 1500);
    // Small buffers (64 connections a side), and a user timeout long enough that the
    // periodic liveness check, which visits every connection, never runs in this test.
    let tcp = TcpSettings {
        rx_buffer: 64 << 10,
        tx_buffer: 64 << 10,
        user_timeout: Duration::from_secs(3600),
        ..TcpSettings::default()
    };
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let caps = QpCaps {
        sq_depth: 16,
        rq_depth: 16,
        srq: None,
    };
    let conns = common::connect_many(&mut a, &mut b, QPS, caps, 7000, 41000);
    let deadline = Instant::now() + Duration::from_secs(60);
    settle(&mut a, &mut b, deadline);

    // Idle turns visit nothing.
    let before = (a.node.visits(), b.node.visits());
    let offered = (a.node.sockets_offered(), b.node.sockets_offered());
    for _ in 0..100 {
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    assert_eq!((a.node.visits(), b.node.visits()), before, "idle turns");
    assert_eq!(
        (a.node.sockets_offered(), b.node.sockets_offered()),
        offered,
        "idle turns hand smoltcp no socket"
    );

    // Writes on one QP, one at a time: each node visits at most one connection a turn.
    let a_mem = a.mem(4096, Access::ALL);
    let b_mem = b.mem(4096, Access::ALL);
    let qp = conns[QPS / 2].2;
    let mut turns = 0u64;
    for id in 1..=WRITES {
        let op = SendOp::Write {
            remote_stag: a_mem.stag,
            remote_to: a_mem.sge(0, 0).to,
        };
        b.rnic
            .post_send(qp, SendWr::new(id, op, &[b_mem.sge(0, 64)]))
            .unwrap();
        let mut done = false;
        while !done {
            assert!(Instant::now() < deadline, "write {id}");
            a.node.poll(&mut a.rnic);
            b.node.poll(&mut b.rnic);
            turns += 1;
            for w in b.wcs() {
                assert_eq!((w.wr_id, w.status), (id, Status::Success));
                done = true;
            }
        }
    }
    let visits = (a.node.visits() - before.0, b.node.visits() - before.1);
    let offered = (
        a.node.sockets_offered() - offered.0,
        b.node.sockets_offered() - offered.1,
    );
    println!(
        "{WRITES} Writes over {QPS} connections: {turns} turns, {visits:?} visits, \
         {offered:?} sockets offered to smoltcp"
    );
    // A turn hands smoltcp the active connection's shard for each frame received and for
    // each egress (two a turn); every socket at each egress alone would be 2 * (QPS + 1).
    let bound = turns * QPS as u64;
    assert!(
        offered.0 <= bound && offered.1 <= bound,
        "{offered:?} sockets offered in {turns} turns: not the active shard alone"
    );
    assert!(visits.0 > 0 && visits.1 > 0);
    assert!(
        visits.0 <= turns && visits.1 <= turns,
        "{visits:?} visits in {turns} turns: more than the one active connection a turn"
    );
}

/// More connections with work than one turn visits (1,024): the turn visits 1,024 and says
/// it was busy, and the next takes the rest, in order; so a node with thousands of busy
/// connections still reads its port between them. Every Write completes.
#[test]
fn a_turn_visits_at_most_1024_connections_and_the_next_takes_the_rest() {
    const MANY: usize = 1100;
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 0x23, 1], [2, 0, 0, 0, 0x23, 2], 1500);
    let tcp = TcpSettings {
        rx_buffer: 16 << 10,
        tx_buffer: 16 << 10,
        user_timeout: Duration::from_secs(3600),
        ..TcpSettings::default()
    };
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let caps = QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    let conns = common::connect_many(&mut a, &mut b, MANY, caps, 8000, 50000);
    let deadline = Instant::now() + Duration::from_secs(120);
    settle(&mut a, &mut b, deadline);
    let a_mem = a.mem(4096, Access::ALL);
    let b_mem = b.mem(4096, Access::ALL);
    for (i, &(_, _, qp)) in conns.iter().enumerate() {
        let op = SendOp::Write {
            remote_stag: a_mem.stag,
            remote_to: a_mem.sge(0, 0).to,
        };
        b.rnic
            .post_send(qp, SendWr::new(i as u64, op, &[b_mem.sge(0, 64)]))
            .unwrap();
    }
    let before = b.node.visits();
    assert!(b.node.poll(&mut b.rnic), "a turn that left work says so");
    assert_eq!(b.node.visits() - before, 1024, "the first turn");
    b.node.poll(&mut b.rnic);
    assert!(
        b.node.visits() - before >= MANY as u64,
        "the next turn takes the rest: {} visits",
        b.node.visits() - before
    );
    let mut done = 0;
    while done < MANY {
        assert!(Instant::now() < deadline, "{done} of {MANY} Writes");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success, "{w:?}");
            done += 1;
        }
    }
}
