//! Two nodes over the in-memory port pair: TCP setup, MPA, and a 4 MiB RDMA Write whose
//! bytes are compared — the node path with no socket or file at all.

mod common;

use common::{pair, until};
use iwarp_engine::{Access, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::memory::MemoryPort;

#[test]
fn rdma_write_over_the_in_memory_link() {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], [2, 0, 0, 0, 8, 0x0b], 1500);
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    let len = 4 << 20;
    let a_mem = a.mem(len, Access::ALL);
    let b_mem = b.mem(len, Access::ALL);
    b_mem.fill(11);
    let op = SendOp::Write {
        remote_stag: a_mem.stag,
        remote_to: a_mem.sge(0, 0).to,
    };
    b.node
        .rnic
        .post_send(b.qp, SendWr::new(1, op, &[b_mem.sge(0, len)]))
        .unwrap();
    let mut done = false;
    until(&mut a, &mut b, 60, |_, b| {
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            done = true;
        }
        // Segments are placed in order: the last 4 KiB arrive last.
        done && a_mem.bytes(len - 4096, 4096) == b_mem.bytes(len - 4096, 4096)
    });
    assert!(
        a_mem.bytes(0, len) == b_mem.bytes(0, len),
        "placed bytes differ"
    );
    assert_eq!(a.node.counters().drops + b.node.counters().drops, 0);
}

/// A neighbour that never answers ARP (a host still booting, a dead peer being dialled)
/// gets ten requests a second, not the thousand smoltcp would send on the dilated clock.
#[test]
fn an_unanswered_neighbour_gets_paced_arp_requests() {
    use iwarpd::node::{Node, TcpSettings};
    use iwarpd::port::Port;
    use std::time::{Duration, Instant};

    let (pa, mut silent) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], [2, 0, 0, 0, 8, 0x0b], 1500);
    let mut node = Node::new(pa, "10.8.0.1".parse().unwrap(), 24, TcpSettings::default());
    let pd = node.rnic.alloc_pd();
    let cq = node.rnic.create_cq(16);
    let caps = iwarp_engine::QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    let qp = node.rnic.create_qp(pd, cq, cq, caps).unwrap();
    node.connect(
        "10.8.0.2".parse().unwrap(),
        7000,
        40000,
        qp,
        Settings::default(),
    )
    .unwrap();
    let (start, mut requests) = (Instant::now(), 0);
    while start.elapsed() < Duration::from_millis(350) {
        node.poll();
        silent
            .rx_burst(32, |f| {
                requests += usize::from(f.len() >= 22 && f[12..14] == [8, 6] && f[20..22] == [0, 1])
            })
            .unwrap();
    }
    // At 0, 100, 200 and 300 ms (one more if the clock read straddles an interval).
    assert!(
        (3..=5).contains(&requests),
        "{requests} ARP requests in 350 ms"
    );
    // The repeats held back are counted, for the stats line.
    assert!(
        node.counters().arp_paced > 10,
        "{} repeats paced",
        node.counters().arp_paced
    );
}
