//! Relay mode (the control plane runs MPA, the node carries the bytes) over the embedded
//! port: many connections opened and closed leave no state behind in either node; a
//! connection closing gracefully outlives its QP without a reset.

mod common;

use common::{segment_dir, End, A_IP, B_IP};
use iwarp_abi::command::CloseReason;
use iwarp_engine::{ConnParams, QpCaps};
use iwarpd::node::NodeEvent;
use iwarpd::port::pcap::PcapPort;
use iwarpd::port::unix::UnixPort;
use iwarpd::port::Port;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Two nodes, A and B, on the embedded port in `dir`, with the last octets `a` and `b` of
/// their MAC addresses.
fn unix_ends(dir: &tempfile::TempDir, a: u8, b: u8) -> (End<UnixPort>, End<UnixPort>) {
    let port = |last| UnixPort::open(dir.path(), [2, 0, 0, 0, 8, last], 1500).unwrap();
    (End::new(port(a), A_IP), End::new(port(b), B_IP))
}

/// Polls both nodes until `done` holds for the events seen so far.
fn until<P: Port, Q: Port>(
    a: &mut End<P>,
    b: &mut End<Q>,
    seen: &mut Vec<(char, NodeEvent)>,
    done: impl Fn(&[(char, NodeEvent)]) -> bool,
) {
    let t = Instant::now();
    while !done(seen) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "stuck; events {seen:?}"
        );
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        seen.extend(a.node.take_events().map(|e| ('a', e)));
        seen.extend(b.node.take_events().map(|e| ('b', e)));
    }
}

#[test]
fn a_hundred_connections_opened_and_closed_leave_nothing_behind() {
    let dir = segment_dir("iwarp-relay");
    let (mut a, mut b) = unix_ends(&dir, 0x0a, 0x0b);
    a.node.relay_listen(7200, 4).unwrap();
    for round in 1..=100u32 {
        b.node
            .relay_connect(round, SocketAddrV4::new(A_IP, 7200))
            .unwrap();
        let mut seen = Vec::new();
        until(&mut a, &mut b, &mut seen, |s| {
            s.iter()
                .any(|e| matches!(e, ('a', NodeEvent::Incoming { .. })))
                && s.iter()
                    .any(|e| matches!(e, ('b', NodeEvent::Established { conn }) if *conn == round))
        });
        let incoming = seen
            .iter()
            .find_map(|e| match e {
                ('a', NodeEvent::Incoming { conn, .. }) => Some(*conn),
                _ => None,
            })
            .unwrap();
        // Alternate who closes first; both ends hear the end.
        if round % 2 == 0 {
            b.node.relay_close(&mut b.rnic, round).unwrap();
        } else {
            a.node.relay_close(&mut a.rnic, incoming).unwrap();
        }
        until(&mut a, &mut b, &mut seen, |s| {
            s.iter()
                .any(|e| matches!(e, ('a', NodeEvent::Closed { .. })))
                && s.iter()
                    .any(|e| matches!(e, ('b', NodeEvent::Closed { .. })))
        });
        // The end that did not close first closes its half too (as control does).
        let _ = a.node.relay_close(&mut a.rnic, incoming);
        let _ = b.node.relay_close(&mut b.rnic, round);
    }
    // Every socket is reclaimed and every connection forgotten.
    let t = Instant::now();
    while a.node.tracked_connections() + b.node.tracked_connections() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "still tracked: a {} b {}",
            a.node.tracked_connections(),
            b.node.tracked_connections()
        );
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// On a port several workers share, a worker that stops listening keeps the frames of the
/// connections it accepted there (they would otherwise go to worker 0, whose stack knows
/// nothing of them): after `relay_unlisten`, bytes still arrive on the accepted connection.
#[test]
fn an_accepted_connection_outlives_its_listener_on_a_shared_port() {
    use iwarpd::port::steer::Steering;
    let dir = segment_dir("iwarp-relay-steer");
    // A's two workers on one socket, as the daemon runs them: worker 0 receives and steers,
    // worker 1 sends on its own handle and listens. A frame steered to worker 0 meets a
    // stack that knows nothing of the connection and answers with a reset.
    let port = UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x1a], 1500).unwrap();
    let sender = port.sender().unwrap();
    let mut views = Steering::share(vec![port, sender], false).unwrap();
    let mut a = End::new(views.pop().unwrap(), A_IP);
    let mut a0 = End::new(views.pop().unwrap(), A_IP);
    let mut b = End::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x1b], 1500).unwrap(),
        B_IP,
    );
    a.node.relay_listen(7201, 1).unwrap();
    b.node
        .relay_connect(1, SocketAddrV4::new(A_IP, 7201))
        .unwrap();
    let t = Instant::now();
    let mut incoming = None;
    let mut established = false;
    while incoming.is_none() || !established {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no connection: a0 {:?} a1 {:?} b {:?}",
            a0.node.counters(),
            a.node.counters(),
            b.node.counters()
        );
        a0.node.poll(&mut a0.rnic);
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for e in a.node.take_events() {
            if let NodeEvent::Incoming { conn, .. } = e {
                incoming = Some(conn);
            }
        }
        established |= b
            .node
            .take_events()
            .any(|e| matches!(e, NodeEvent::Established { conn: 1 }));
    }
    assert!(a.node.relay_unlisten(7201));
    // An MPA Request (RFC 5044 section 7.1: the key, flags with C set, revision 1, no private
    // data), which the relay hands up whole.
    let mut request = b"MPA ID Req Frame".to_vec();
    request.extend([0x40, 1, 0, 0]);
    b.node.relay_send(1, &request).unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    while got.len() < request.len() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the accepted connection lost its frames with its listener ({got:?})"
        );
        a0.node.poll(&mut a0.rnic);
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for e in a.node.take_events() {
            if let NodeEvent::Bytes { data, .. } = e {
                got.extend(data);
            }
        }
    }
    assert_eq!(got, request);
}

/// A QP destroyed right after its graceful disconnect, as rping does, leaves its connection
/// to finish the close: the FIN after the last FPDU, and no RST, which would let the peer's
/// TCP discard what its RNIC had not read yet (siw's rping client lost our last Send so).
/// Data that comes for the QP that is gone resets the connection (Linux resets a closed
/// socket that receives data, too); a connection not closing is reset at once.
#[test]
fn a_connection_closing_gracefully_outlives_its_qp_without_a_reset() {
    let dir = segment_dir("iwarp-relay-release");
    let pcap = dir.path().join("a.pcap");
    let port = UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x2a], 1500).unwrap();
    let mut a = End::new(PcapPort::new(port, &pcap).unwrap(), A_IP);
    let mut b = End::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x2b], 1500).unwrap(),
        B_IP,
    );
    a.node.relay_listen(7202, 4).unwrap();
    let open = |a: &mut End<PcapPort<UnixPort>>, b: &mut End<UnixPort>, id: u32| {
        b.node
            .relay_connect(id, SocketAddrV4::new(A_IP, 7202))
            .unwrap();
        let mut seen = Vec::new();
        until(a, b, &mut seen, |s| {
            s.iter()
                .any(|e| matches!(e, ('a', NodeEvent::Incoming { .. })))
                && s.iter()
                    .any(|e| matches!(e, ('b', NodeEvent::Established { conn }) if *conn == id))
        });
        seen.iter()
            .find_map(|e| match e {
                ('a', NodeEvent::Incoming { conn, .. }) => Some(*conn),
                _ => None,
            })
            .unwrap()
    };
    let closed = |seen: &[(char, NodeEvent)], who: char| {
        seen.iter().find_map(|e| match e {
            (w, NodeEvent::Closed { reason, .. }) if *w == who => Some(*reason),
            _ => None,
        })
    };
    let resets = |pcap: &std::path::Path| {
        iwarp_testkit::capture_frames(pcap)
            .iter()
            .filter(|f| iwarp_testkit::tcp_segment(f).is_some_and(|s| s.rst))
            .count()
    };

    // Closing: released, the close goes on; B hears the FIN and closes its half (a relay
    // connection still in setup ends at once), and both ends are over gracefully. A hears
    // of it too (control ignores it).
    let conn = open(&mut a, &mut b, 1);
    a.node.relay_close(&mut a.rnic, conn).unwrap();
    a.node.relay_release(&mut a.rnic, conn).unwrap();
    let mut seen = Vec::new();
    until(&mut a, &mut b, &mut seen, |s| closed(s, 'a').is_some());
    assert_eq!(closed(&seen, 'b'), Some(CloseReason::Graceful));
    assert_eq!(resets(&pcap), 0, "A reset a connection closing gracefully");

    // Released while closing, then data comes: reset.
    let conn = open(&mut a, &mut b, 2);
    a.node.relay_close(&mut a.rnic, conn).unwrap();
    a.node.relay_release(&mut a.rnic, conn).unwrap();
    b.node.relay_send(2, b"for a QP that is gone").unwrap();
    let t = Instant::now();
    while resets(&pcap) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no reset for the data"
        );
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    assert_eq!(resets(&pcap), 1);

    // Not closing: reset at once.
    let conn = open(&mut a, &mut b, 3);
    a.node.relay_release(&mut a.rnic, conn).unwrap();
    let mut seen = Vec::new();
    until(&mut a, &mut b, &mut seen, |s| closed(s, 'b').is_some());
    assert_eq!(closed(&seen, 'b'), Some(CloseReason::Reset));
    assert_eq!(resets(&pcap), 2);
}

/// Closing many connections costs each node work in proportion to the connections closed:
/// forgetting an ended connection must not revisit every other one. 300 connections are
/// opened, then closed one after another; the connection visits both nodes make until
/// every one is forgotten stay within a few per connection (a rebuild of the node's maps
/// at each forgotten connection makes them grow with the square: about 45,000 per node).
#[test]
fn closing_many_connections_costs_each_node_linear_work() {
    const N: u32 = 300;
    let dir = segment_dir("iwarp-relay-many");
    let (mut a, mut b) = unix_ends(&dir, 0x2a, 0x2b);
    a.node.relay_listen(7202, 64).unwrap();
    let mut seen = Vec::new();
    let mut incoming = Vec::new();
    let mut established = 0;
    let mut next = 1;
    let t = Instant::now();
    while incoming.len() < N as usize || established < N {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{} incoming, {established} established",
            incoming.len()
        );
        // No more connects in flight than the listener takes at once.
        while next <= N && next - 1 - established < 32 {
            b.node
                .relay_connect(next, SocketAddrV4::new(A_IP, 7202))
                .unwrap();
            next += 1;
        }
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for e in a.node.take_events() {
            match e {
                NodeEvent::Incoming { conn, .. } => incoming.push(conn),
                e => seen.push(('a', e)),
            }
        }
        for e in b.node.take_events() {
            match e {
                NodeEvent::Established { .. } => established += 1,
                e => seen.push(('b', e)),
            }
        }
    }
    assert!(seen.is_empty(), "unexpected events {seen:?}");
    // Each into RTS on a QP of its own, as control moves it once MPA is done: steady
    // connections, which a turn visits only when they have work.
    let caps = QpCaps {
        sq_depth: 16,
        rq_depth: 16,
        srq: None,
    };
    let params = ConnParams::new(true, 8, 8, 1460);
    for conn in incoming {
        let qp = a.rnic.create_qp(a.pd, a.cq, a.cq, caps).unwrap();
        a.node.relay_rts(&mut a.rnic, conn, qp, params).unwrap();
    }
    for conn in 1..=N {
        let qp = b.rnic.create_qp(b.pd, b.cq, b.cq, caps).unwrap();
        b.node.relay_rts(&mut b.rnic, conn, qp, params).unwrap();
    }
    for _ in 0..10 {
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    let before = (a.node.visits(), b.node.visits());
    // One close at a time, as applications end their connections, each over at both ends
    // before the next closes; then until every one is forgotten.
    let mut closed = (0, 0);
    for conn in 1..=N + 1 {
        if conn <= N {
            b.node.relay_close(&mut b.rnic, conn).unwrap();
        }
        let t = Instant::now();
        while closed.0.min(closed.1) < conn.min(N) as usize
            || (conn > N && a.node.tracked_connections() + b.node.tracked_connections() > 0)
        {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "after closing {conn}: {closed:?} closed, tracked a {} b {}",
                a.node.tracked_connections(),
                b.node.tracked_connections()
            );
            a.node.poll(&mut a.rnic);
            b.node.poll(&mut b.rnic);
            let ended: Vec<_> = a.node.take_events().collect();
            for e in ended {
                if let NodeEvent::Closed { conn, .. } = e {
                    closed.0 += 1;
                    // The passive end closes its half too, as control does.
                    let _ = a.node.relay_close(&mut a.rnic, conn);
                }
            }
            closed.1 += b
                .node
                .take_events()
                .filter(|e| matches!(e, NodeEvent::Closed { .. }))
                .count();
        }
    }
    assert_eq!(closed, (N as usize, N as usize));
    let visits = (a.node.visits() - before.0, b.node.visits() - before.1);
    println!("visits while closing {N}: a {} b {}", visits.0, visits.1);
    let bound = 10 * u64::from(N);
    assert!(
        visits.0 <= bound && visits.1 <= bound,
        "visits while closing {N} connections: a {} b {} (bound {bound})",
        visits.0,
        visits.1
    );
}

/// A connect to a port nobody listens on is refused by the peer's RST, and said so:
/// `CloseReason::Refused`, which the drop-in reports as ECONNREFUSED, as Linux does. (A
/// connect never answered ends as `Timeout`, after the setup timeout of 10 s.)
#[test]
fn a_refused_connect_ends_as_refused() {
    let dir = segment_dir("iwarp-relay-refused");
    let (mut a, mut b) = unix_ends(&dir, 0x3a, 0x3b);
    b.node
        .relay_connect(1, SocketAddrV4::new(A_IP, 7203))
        .unwrap();
    let mut seen = Vec::new();
    until(&mut a, &mut b, &mut seen, |s| {
        s.iter()
            .any(|e| matches!(e, ('b', NodeEvent::Closed { conn: 1, .. })))
    });
    assert!(
        seen.iter().any(|e| matches!(
            e,
            (
                'b',
                NodeEvent::Closed {
                    conn: 1,
                    reason: CloseReason::Refused
                }
            )
        )),
        "{seen:?}"
    );
}

/// A connect nobody answers ends as `Timeout` once the setup timeout (10 s) has passed: not
/// refused, and not left open. Connection 1 goes to an address no host has (its ARP requests
/// go unanswered); connection 2 to a host that answered ARP before and whose node has since
/// stopped reading (its SYNs go unanswered).
#[test]
fn an_unanswered_connect_ends_as_timeout() {
    let dir = segment_dir("iwarp-relay-unanswered");
    let (mut a, mut b) = unix_ends(&dir, 0x3c, 0x3d);
    // A refused connect first: B learns A's hardware address.
    b.node
        .relay_connect(3, SocketAddrV4::new(A_IP, 7206))
        .unwrap();
    let mut seen = Vec::new();
    until(&mut a, &mut b, &mut seen, |s| {
        s.iter()
            .any(|e| matches!(e, ('b', NodeEvent::Closed { conn: 3, .. })))
    });
    b.node
        .relay_connect(1, SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 99), 7204))
        .unwrap();
    b.node
        .relay_connect(2, SocketAddrV4::new(A_IP, 7205))
        .unwrap();
    // A's node stops here: only B runs.
    let t = Instant::now();
    let mut ended = Vec::new();
    while ended.len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(40), "stuck: {ended:?}");
        b.node.poll(&mut b.rnic);
        for e in b.node.take_events() {
            if let NodeEvent::Closed { conn, reason } = e {
                ended.push((conn, reason));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    ended.sort_by_key(|&(conn, _)| conn);
    assert_eq!(
        ended,
        [(1, CloseReason::Timeout), (2, CloseReason::Timeout)],
        "{seen:?}"
    );
}
